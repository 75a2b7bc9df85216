//! Fencing tokens against a real PostgreSQL: a lock holder that stalls past its lease writes
//! late, and the database refuses the stale write.
//!
//! ```sh
//! cargo run --example fencing_postgres     # starts a private redis-server and PostgreSQL
//! REDIS_URL=redis://127.0.0.1:6380/ PG_CONFIG='host=127.0.0.1 port=5433 user=app dbname=app' \
//!     cargo run --example fencing_postgres
//! ```
//!
//! The write is `UPDATE stock SET qty = $3, writer = $4, fence = $1 WHERE id = $2 AND
//! fence <= $1` in the same transaction as the rest of the write (a `stock_log` row), with `$1`
//! the holder's fencing token. Run fenced and unfenced:
//!
//! 1. Holder A acquires `fencing-pg:stock:42` (ttl 400 ms, no watchdog), reads the stock (10)
//!    and stalls before its write.
//! 2. Holder B's acquire returns once A's lease has run out, with a larger token; B sells 3
//!    (writes 7) and releases.
//! 3. A resumes and writes what it planned before the stall (9) with its old token.
//!
//! Fenced, PostgreSQL rejects A's update (0 rows: `fence <= $1` is false) and the transaction is
//! rolled back: the stock stays 7. Unfenced, A's write clobbers B's sale: 9, a lost update. The
//! program exits non-zero if either outcome differs. It uses (and resets) the tables `stock` and
//! `stock_log` of the database it is given.
//!
//! Source: Martin Kleppmann, "How to do distributed locking" (2016).

mod scenario;

use std::process::ExitCode;

use clap::Parser;
use lockcore::LockManager;
use scenario::{BoxError, Mode, Write};

#[derive(Parser, Debug)]
#[command(about = "A stalled lock holder's stale write to PostgreSQL, with and without fencing")]
struct Cli {
    /// Redis to use; without it a private redis-server is started.
    #[arg(long, env = "REDIS_URL")]
    redis_url: Option<String>,
    /// PostgreSQL to use, as a libpq connection string; without it a private server is started.
    #[arg(long, env = "PG_CONFIG")]
    pg_config: Option<String>,
}

#[tokio::main]
async fn main() -> ExitCode {
    match demo(Cli::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fencing_postgres: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn demo(cli: Cli) -> Result<(), BoxError> {
    let (redis_url, _redis) = match cli.redis_url {
        Some(url) => (url, None),
        None => {
            let server = lockcore_tests::RedisServer::start();
            (server.url(), Some(server))
        }
    };
    let (pg_config, _pg) = match cli.pg_config {
        Some(config) => (config, None),
        None => {
            let server = lockcore_tests::PostgresServer::start();
            (server.connection_string(), Some(server))
        }
    };
    let locks = LockManager::connect(&redis_url).await?;
    println!("fencing tokens against PostgreSQL: a holder stalled past its lease writes late");
    println!(
        "redis {}, postgres {}; holder A: ttl {} ms, no watchdog",
        lockcore::redact_url(&redis_url),
        pg_config,
        scenario::A_TTL.as_millis()
    );
    let mut failures = Vec::new();
    for mode in [Mode::Fenced, Mode::Unfenced] {
        let run = scenario::run(&locks, &pg_config, mode).await?;
        println!();
        println!("[{}]", mode.name());
        println!(
            "  A took token {}, read the stock ({}) and stalled",
            run.a_token,
            scenario::INITIAL_QTY
        );
        println!(
            "  B took token {} after {} ms (A's lease ran out), sold 3",
            run.b_token,
            run.b_waited.as_millis()
        );
        let a = match run.a_write {
            Write::Applied => "applied".to_owned(),
            Write::Rejected { current_fence } => {
                format!(
                    "rejected by `fence <= $1` (the row's fence is {current_fence}), rolled back"
                )
            }
        };
        println!("  A resumed and wrote with token {}: {a}", run.a_token);
        match &run.a_release {
            Ok(()) => println!("  A's release: ok"),
            Err(e) => println!("  A's release: {e}"),
        }
        let (qty, writer, fence) = &run.final_row;
        println!(
            "  final row: qty {qty}, writer {writer}, fence {fence}; log {:?}",
            run.log
        );
        if run.as_expected() {
            println!(
                "  -> {}",
                match mode {
                    Mode::Fenced => "the newest holder's write survived",
                    Mode::Unfenced => "the stale write CLOBBERED the newer holder's sale",
                }
            );
        } else {
            println!("  -> UNEXPECTED");
            failures.push(mode.name());
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!("unexpected outcome in: {}", failures.join(", ")).into())
    }
}
