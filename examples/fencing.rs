//! Kleppmann's scenario on real processes: a lock holder frozen past its lease writes late.
//!
//! ```sh
//! cargo run --example fencing            # starts a private redis-server
//! REDIS_URL=redis://127.0.0.1:6380/ cargo run --example fencing
//! ```
//!
//! For each resource (a Redis hash written with [`FencedRedis`], and a SQLite row written with
//! `UPDATE .. WHERE fence <= ?token`), fenced and unfenced:
//!
//! 1. Holder A, a child process, acquires `stock:42` (ttl 500 ms, no watchdog), checks that it
//!    holds the lock, and is about to write when it is frozen with `SIGSTOP` (think GC pause).
//! 2. Holder B (this process) acquires once A's lease has run out (its acquire waits on the
//!    lock, not on a timer), gets a larger fencing token, writes, releases.
//! 3. A is resumed with `SIGCONT` and performs its write with its old token.
//!
//! With fencing, A's write is rejected and B's value stays. Without, A's stale write clobbers
//! B's. The program exits non-zero if either outcome differs.
//!
//! Source: Martin Kleppmann, "How to do distributed locking" (2016).

use std::error::Error;
use std::path::{Path, PathBuf};
use std::process::{Command as StdCommand, ExitCode, Stdio};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand, ValueEnum};
use lockcore::{FenceError, FencedRedis, LockManager, LockOptions};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{ChildStdout, Command};

type BoxError = Box<dyn Error + Send + Sync>;

/// The lock key and the Redis resource key.
const KEY: &str = "fencing-demo:stock:42";
/// Holder A's lease.
const A_TTL: Duration = Duration::from_millis(500);

#[derive(Parser, Debug)]
#[command(about = "A paused lock holder's stale write, with and without fencing tokens")]
struct Cli {
    /// Redis to use; without it a private redis-server is started.
    #[arg(long, env = "REDIS_URL")]
    redis_url: Option<String>,
    #[command(subcommand)]
    role: Option<Role>,
}

#[derive(Subcommand, Debug)]
enum Role {
    /// Internal: holder A, run as a child process by the demo.
    #[command(hide = true)]
    Holder {
        #[arg(long)]
        url: String,
        #[arg(long, value_enum)]
        resource: Resource,
        #[arg(long)]
        fenced: bool,
        #[arg(long)]
        sqlite: PathBuf,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Resource {
    Redis,
    Sqlite,
}

impl Resource {
    fn name(self) -> &'static str {
        match self {
            Resource::Redis => "redis",
            Resource::Sqlite => "sqlite",
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.role {
        Some(Role::Holder {
            url,
            resource,
            fenced,
            sqlite,
        }) => holder_a(&url, resource, fenced, &sqlite).await,
        None => demo(cli.redis_url).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fencing: {e}");
            ExitCode::FAILURE
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The demo (parent process, holder B)
// ---------------------------------------------------------------------------------------------

async fn demo(redis_url: Option<String>) -> Result<(), BoxError> {
    let (url, _server) = match redis_url {
        Some(url) => (url, None),
        None => {
            let server = lockcore_tests::RedisServer::start();
            (server.url(), Some(server))
        }
    };
    let dir = tempfile::tempdir()?;
    let sqlite = dir.path().join("stock.db");
    println!("fencing tokens: a lock holder paused past its lease writes late (Kleppmann 2016)");
    println!(
        "redis {url}, sqlite {}; holder A: ttl {} ms, no watchdog",
        sqlite.display(),
        A_TTL.as_millis()
    );
    println!();

    let mut failures = Vec::new();
    for resource in [Resource::Redis, Resource::Sqlite] {
        for fenced in [true, false] {
            let run = scenario(&url, resource, fenced, &sqlite).await?;
            let label = format!("{} {}", resource.name(), mode(fenced));
            let expected_final = if fenced { &run.b_value } else { &run.a_value };
            let as_expected = run.final_value == *expected_final && run.a_wrote != fenced;
            println!("[{label}]");
            println!(
                "  A (pid {}) acquired token {}, is_held() = true, then froze (SIGSTOP) before writing",
                run.a_pid, run.a_token
            );
            println!(
                "  B acquired token {} after waiting {} ms for A's lease, wrote {:?}",
                run.b_token,
                run.b_waited.as_millis(),
                run.b_value
            );
            println!(
                "  A resumed (SIGCONT) and wrote with token {}: {}",
                run.a_token, run.a_report
            );
            println!("  A's release: {}", run.a_release);
            println!(
                "  final value: {:?}  -> {}",
                run.final_value,
                match (fenced, as_expected) {
                    (true, true) => "the newest holder's write survived",
                    (false, true) => "the stale write CLOBBERED the newer holder's",
                    (_, false) => "UNEXPECTED",
                }
            );
            println!();
            if !as_expected {
                failures.push(label);
            }
        }
    }
    reset(&url, Resource::Redis, &sqlite).await?; // leave no demo key behind on REDIS_URL
    if failures.is_empty() {
        println!(
            "summary: with fencing the paused holder's write was rejected on both resources; \
             without it, it clobbered the newer write on both"
        );
        Ok(())
    } else {
        Err(format!("unexpected outcome in: {}", failures.join(", ")).into())
    }
}

fn mode(fenced: bool) -> &'static str {
    if fenced { "fenced" } else { "unfenced" }
}

struct Run {
    a_pid: u32,
    a_token: u64,
    a_value: String,
    a_wrote: bool,
    a_report: String,
    a_release: String,
    b_token: u64,
    b_waited: Duration,
    b_value: String,
    final_value: String,
}

async fn scenario(
    url: &str,
    resource: Resource,
    fenced: bool,
    sqlite: &Path,
) -> Result<Run, BoxError> {
    reset(url, resource, sqlite).await?;

    // Holder A: a child process.
    let mut child = Command::new(std::env::current_exe()?)
        .arg("holder")
        .arg("--url")
        .arg(url)
        .arg("--resource")
        .arg(resource.name())
        .args(fenced.then_some("--fenced"))
        .arg("--sqlite")
        .arg(sqlite)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let a_pid = child.id().ok_or("holder A exited at once")?;
    let mut a_out = BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
    let mut a_in = child.stdin.take().ok_or("no stdin")?;
    let a_token: u64 = expect_line(&mut a_out, "acquired").await?.parse()?;

    // A is about to write: freeze it, then hand it the go-ahead it will read when resumed.
    signal(a_pid, "-STOP")?;
    a_in.write_all(b"write\n").await?;
    a_in.flush().await?;

    // Holder B: its acquire waits until A's lease has run out in Redis.
    let locks = LockManager::connect(url).await?;
    let started = Instant::now();
    let b = locks
        .acquire(
            KEY,
            &LockOptions::new(Duration::from_secs(5)).wait(Duration::from_secs(5)),
        )
        .await?;
    let b_waited = started.elapsed();
    let b_token = b.fencing_token();
    let b_value = format!("written by B (token {b_token})");
    write(url, resource, fenced, sqlite, b_token, &b_value)
        .await?
        .map_err(|stale| format!("B's own write was rejected: {stale}"))?;
    b.release().await?;

    // A wakes up and writes with its old token.
    signal(a_pid, "-CONT")?;
    let a_report = expect_line(&mut a_out, "write").await?;
    let a_release = expect_line(&mut a_out, "release").await?;
    let status = child.wait().await?;
    if !status.success() {
        return Err(format!("holder A failed: {status}").into());
    }
    Ok(Run {
        a_pid,
        a_token,
        a_value: format!("written by A (token {a_token})"),
        a_wrote: a_report == "accepted",
        a_report,
        a_release,
        b_token,
        b_waited,
        b_value,
        final_value: read(url, resource, sqlite).await?,
    })
}

/// `kill <sig> <pid>`: the workspace forbids `unsafe`, so no `libc::kill`.
fn signal(pid: u32, sig: &str) -> Result<(), BoxError> {
    let status = StdCommand::new("kill")
        .arg(sig)
        .arg(pid.to_string())
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("kill {sig} {pid}: {status}").into())
    }
}

/// Reads the child's next line, which must be `<tag> <rest>`, and returns `<rest>`.
async fn expect_line(
    out: &mut Lines<BufReader<ChildStdout>>,
    tag: &str,
) -> Result<String, BoxError> {
    let line = tokio::time::timeout(Duration::from_secs(10), out.next_line())
        .await
        .map_err(|_| format!("holder A said nothing for 10 s (waiting for `{tag}`)"))??
        .ok_or_else(|| format!("holder A exited before `{tag}`"))?;
    line.strip_prefix(tag)
        .map(|rest| rest.trim().to_owned())
        .ok_or_else(|| format!("holder A said {line:?}, expected `{tag} ..`").into())
}

// ---------------------------------------------------------------------------------------------
// Holder A (child process)
// ---------------------------------------------------------------------------------------------

async fn holder_a(
    url: &str,
    resource: Resource,
    fenced: bool,
    sqlite: &Path,
) -> Result<(), BoxError> {
    let locks = LockManager::connect(url).await?;
    let guard = locks
        .acquire(KEY, &LockOptions::new(A_TTL).wait(Duration::ZERO))
        .await?;
    let token = guard.fencing_token();
    if !guard.is_held() {
        return Err("lease lost right after acquiring".into());
    }
    println!("acquired {token}");
    // The parent freezes this process here; the go-ahead is waiting in stdin when it resumes.
    let mut go = String::new();
    BufReader::new(tokio::io::stdin())
        .read_line(&mut go)
        .await?;
    // No is_held() check here: any check can be followed by a pause before the write. The
    // resource has to reject the write itself.
    let value = format!("written by A (token {token})");
    match write(url, resource, fenced, sqlite, token, &value).await? {
        Ok(()) => println!("write accepted"),
        Err(stale) => println!("write rejected: {stale}"),
    }
    match guard.release().await {
        Ok(()) => println!("release ok"),
        Err(e) => println!("release {e}"),
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The resources
// ---------------------------------------------------------------------------------------------

/// Writes `value` with `token`. `Ok(Err(reason))` is a rejected stale write.
async fn write(
    url: &str,
    resource: Resource,
    fenced: bool,
    sqlite: &Path,
    token: u64,
    value: &str,
) -> Result<Result<(), String>, BoxError> {
    match resource {
        Resource::Redis => {
            let mut con = redis_connection(url).await?;
            let stock = FencedRedis::new(KEY);
            if fenced {
                match stock.set(&mut con, token, value).await {
                    Ok(()) => Ok(Ok(())),
                    Err(FenceError::Stale(stale)) => Ok(Err(stale.to_string())),
                    Err(e) => Err(e.into()),
                }
            } else {
                // The same hash, written without the comparison.
                let () = redis::cmd("HSET")
                    .arg(KEY)
                    .arg("value")
                    .arg(value)
                    .arg("fence")
                    .arg(token)
                    .query_async(&mut con)
                    .await?;
                Ok(Ok(()))
            }
        }
        Resource::Sqlite => {
            let db = rusqlite::Connection::open(sqlite)?;
            // The SQL pattern: the fence comparison is part of the UPDATE, one atomic statement.
            let sql = if fenced {
                "UPDATE stock SET value = ?1, fence = ?2 WHERE id = 42 AND fence <= ?2"
            } else {
                "UPDATE stock SET value = ?1, fence = ?2 WHERE id = 42"
            };
            match db.execute(sql, rusqlite::params![value, token])? {
                0 => {
                    let latest: u64 =
                        db.query_row("SELECT fence FROM stock WHERE id = 42", [], |r| r.get(0))?;
                    Ok(Err(format!(
                        "stale write to stock row 42 rejected: 0 rows changed (fencing token {token} < fence {latest})"
                    )))
                }
                _ => Ok(Ok(())),
            }
        }
    }
}

async fn read(url: &str, resource: Resource, sqlite: &Path) -> Result<String, BoxError> {
    match resource {
        Resource::Redis => {
            let mut con = redis_connection(url).await?;
            let current: Option<(String, u64)> = FencedRedis::new(KEY).get(&mut con).await?;
            Ok(current.map(|(value, _fence)| value).unwrap_or_default())
        }
        Resource::Sqlite => {
            let db = rusqlite::Connection::open(sqlite)?;
            Ok(db.query_row("SELECT value FROM stock WHERE id = 42", [], |r| r.get(0))?)
        }
    }
}

async fn reset(url: &str, resource: Resource, sqlite: &Path) -> Result<(), BoxError> {
    match resource {
        Resource::Redis => {
            let mut con = redis_connection(url).await?;
            let _: i64 = redis::cmd("DEL").arg(KEY).query_async(&mut con).await?;
        }
        Resource::Sqlite => {
            let db = rusqlite::Connection::open(sqlite)?;
            db.execute_batch(
                "CREATE TABLE IF NOT EXISTS stock (
                     id INTEGER PRIMARY KEY,
                     value TEXT NOT NULL,
                     fence INTEGER NOT NULL DEFAULT 0
                 );
                 INSERT OR REPLACE INTO stock (id, value, fence) VALUES (42, 'initial', 0);",
            )?;
        }
    }
    Ok(())
}

async fn redis_connection(url: &str) -> Result<redis::aio::MultiplexedConnection, BoxError> {
    Ok(redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?)
}
