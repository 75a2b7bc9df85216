//! Leader election with fenced terms: three processes campaign, the leader writes heartbeats to
//! SQLite with its term, and SQLite refuses a deposed leader's late write.
//!
//! ```sh
//! cargo run --example leader_sqlite               # starts a private redis-server
//! cargo run --example leader_sqlite -- --unfenced # the twin: terms not checked by SQLite
//! ```
//!
//! Each worker runs `LockManager::campaign("leader:heartbeat", ttl 600 ms, no wait limit)`; the
//! one elected writes a heartbeat every 400 ms: it checks `is_leader()`, prepares the row
//! (300 ms), and writes it in one SQLite transaction that first raises the stored term,
//! `UPDATE fence SET term = ?1 WHERE id = 1 AND term <= ?1`, and inserts the row only when that
//! changed a row. The program then:
//!
//! 1. waits for the first leader to pass its check, and freezes it there (`SIGSTOP`), past its
//!    lease's TTL;
//! 2. waits until another worker is elected with a larger term and has written a heartbeat;
//! 3. resumes the old leader (`SIGCONT`): it writes the row it prepared before the pause, with
//!    its old term.
//!
//! Fenced, SQLite refuses that write (the stored term is larger), and the old leader then finds
//! `is_leader()` false and steps down. Unfenced (`--unfenced`: the insert without the term
//! check), the stale heartbeat lands after the new leader's. The last line is
//! `leader_sqlite: fence=on old_term=1 new_term=2 stale_refused=1 stale_landed=0`; the program
//! exits non-zero when the outcome is not the expected one.

#[path = "fleet.rs"]
mod fleet;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use fleet::{BoxError, Fleet};
use lockcore::{LockManager, LockOptions};
// The fenced write (`heartbeats::heartbeat`): `UPDATE fence SET term = ?1 WHERE id = 1 AND
// term <= ?1`, and the row only when that changed a row, in one transaction.
use lockcore_tests::heartbeats::{create, heartbeat, stale_rows};

const KEY: &str = "leader:heartbeat";
const TTL: Duration = Duration::from_millis(600);
/// Between heartbeats.
const INTERVAL: Duration = Duration::from_millis(100);
/// From the leader's check to its write: where a pause hurts.
const PREPARE: Duration = Duration::from_millis(300);

#[derive(Parser, Debug)]
#[command(about = "Three processes elect a leader that writes fenced heartbeats to SQLite")]
struct Cli {
    #[command(subcommand)]
    worker: Option<Worker>,
    /// Redis to use; without it a private redis-server is started.
    #[arg(long, env = "REDIS_URL")]
    redis_url: Option<String>,
    /// Run the twin whose writes SQLite does not fence.
    #[arg(long)]
    unfenced: bool,
}

#[derive(Subcommand, Debug)]
enum Worker {
    /// One campaigning process (started by the program itself).
    Worker {
        #[arg(long)]
        url: String,
        #[arg(long)]
        db: PathBuf,
        #[arg(long)]
        name: String,
        #[arg(long)]
        unfenced: bool,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.worker {
        Some(Worker::Worker {
            url,
            db,
            name,
            unfenced,
        }) => worker(&url, &db, &name, !unfenced).await,
        None => demo(cli.redis_url, !cli.unfenced).await,
    };
    fleet::exit("leader_sqlite", outcome)
}

/// One worker: campaigns, then leads until it finds itself deposed. Reports `elected <term>`,
/// `checked <term>`, `wrote <term>` / `refused <term>` and `deposed <term>`.
async fn worker(url: &str, db: &Path, name: &str, fenced: bool) -> Result<(), BoxError> {
    let locks = LockManager::builder()
        .url(url)
        .process_label(name)
        .build()
        .await?;
    let opts = LockOptions::new(TTL).wait(Duration::MAX);
    let leadership = locks.campaign(KEY, &opts).await?;
    let term = leadership.term();
    println!("elected {term}");
    // Bounded by the leadership: it ends with `deposed` once the lease is lost.
    loop {
        tokio::time::sleep(INTERVAL).await;
        if !leadership.is_leader() {
            println!("deposed {term}");
            return Ok(());
        }
        println!("checked {term}");
        tokio::time::sleep(PREPARE).await; // a pause here outlives the lease
        let (db, name) = (db.to_owned(), name.to_owned());
        let wrote =
            tokio::task::spawn_blocking(move || heartbeat(&db, term, &name, fenced)).await??;
        println!("{} {term}", if wrote { "wrote" } else { "refused" });
    }
}

/// The line of worker `who` (any worker when `None`) that starts with `tag`, skipping others.
async fn expect(
    workers: &mut Fleet,
    who: Option<usize>,
    tag: &str,
    within: Duration,
) -> Result<(usize, u64), BoxError> {
    // Bounded by the time limit (each `next` waits at most `within`) and a line count.
    for _ in 0..1_000 {
        let (index, line) = workers
            .next(within)
            .await
            .ok_or_else(|| format!("no `{tag}` line within {within:?}"))?;
        println!("worker {index}: {line}");
        if who.is_none_or(|w| w == index)
            && let Some(term) = line.strip_prefix(tag)
        {
            return Ok((index, term.trim().parse()?));
        }
    }
    Err(format!("no `{tag}` line").into())
}

async fn demo(redis_url: Option<String>, fenced: bool) -> Result<(), BoxError> {
    let (url, _server) = fleet::redis(redis_url);
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("heartbeats.db");
    create(&db)?;
    let args: Vec<Vec<String>> = (0..3)
        .map(|i| {
            let mut args = vec![
                "worker".to_owned(),
                format!("--url={url}"),
                format!("--db={}", db.display()),
                format!("--name=w{i}"),
            ];
            if !fenced {
                args.push("--unfenced".to_owned());
            }
            args
        })
        .collect();
    let mut workers = Fleet::start(&args)?;
    let wait = Duration::from_secs(10);
    let (old, old_term) = expect(&mut workers, None, "elected ", wait).await?;
    expect(&mut workers, Some(old), "checked ", wait).await?;
    workers.signal(old, "-STOP")?;
    println!("worker {old}: stopped (SIGSTOP) between its check and its write");
    let (new, new_term) = expect(&mut workers, None, "elected ", wait).await?;
    expect(&mut workers, Some(new), "wrote ", wait).await?;
    workers.signal(old, "-CONT")?;
    println!("worker {old}: resumed (SIGCONT)");
    // Its pending write, with the old term.
    let (_, refused) = loop {
        let (index, line) = workers
            .next(wait)
            .await
            .ok_or("the old leader said nothing")?;
        println!("worker {index}: {line}");
        if index != old {
            continue;
        }
        if line.starts_with("refused ") {
            break (index, true);
        }
        if line.starts_with("wrote ") {
            break (index, false);
        }
    };
    workers.finish(Duration::ZERO).await;
    let stale_landed = stale_rows(&db)?;
    println!(
        "leader_sqlite: fence={} old_term={old_term} new_term={new_term} stale_refused={} stale_landed={stale_landed}",
        if fenced { "on" } else { "off" },
        u8::from(refused),
    );
    let expected = new_term > old_term
        && if fenced {
            refused && stale_landed == 0
        } else {
            !refused && stale_landed > 0
        };
    if expected {
        Ok(())
    } else {
        Err("the outcome is not the expected one".into())
    }
}
