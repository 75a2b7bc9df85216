//! A scheduled job on three worker processes whose clocks disagree: with `hold_at_least` it runs
//! once per period across the fleet; its twin without the minimum runs it up to three times.
//!
//! ```sh
//! cargo run --example scheduled_job              # starts a private redis-server
//! cargo run --example scheduled_job -- --no-hold # the twin: the same fleet without the minimum
//! REDIS_URL=redis://127.0.0.1:6380/ cargo run --example scheduled_job
//! ```
//!
//! Every worker runs the job `report` on a `tokio::time::interval` of 1 s, but its schedule
//! is shifted by 0, 150 or 300 ms, as clock skew or a slow start shifts it (ShedLock#231). The
//! job takes 30 ms and runs under `#[distributed_lock(.., wait_ms = 0, on_contended = "skip",
//! hold_at_least_ms = 650)]`: the first worker to fire in a period runs it; its release keeps the
//! key until 650 ms after the acquire (by Redis' clock), so the workers that fire 150 and 300 ms
//! later find it held and skip. Without `hold_at_least_ms` the release deletes the key after
//! 30 ms, and each late worker runs the job again.
//!
//! The program prints the runs per period and a last line `scheduled_job: hold=on periods=3
//! runs=3 per_period=[1, 1, 1]`; it exits non-zero when the outcome is not the expected one
//! (exactly one run per period with the minimum, more runs than periods without it).

#[path = "fleet.rs"]
#[allow(dead_code)] // no signals here
mod fleet;

use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::{Parser, Subcommand};
use fleet::{BoxError, Fleet};
use lockcore::{LockError, LockManager, distributed_lock};

/// The job's schedule.
const PERIOD: Duration = Duration::from_millis(1_000);
/// How far each worker's schedule is shifted (its clock's offset).
const OFFSETS_MS: [u64; 3] = [0, 150, 300];
/// How long the job runs.
const JOB: Duration = Duration::from_millis(30);

#[derive(Parser, Debug)]
#[command(
    about = "A scheduled job on three workers with offset clocks, with and without hold_at_least"
)]
struct Cli {
    #[command(subcommand)]
    worker: Option<Worker>,
    /// Redis to use; without it a private redis-server is started.
    #[arg(long, env = "REDIS_URL")]
    redis_url: Option<String>,
    /// Run the twin without the minimum hold.
    #[arg(long)]
    no_hold: bool,
    /// How many periods to run.
    #[arg(long, default_value_t = 3)]
    periods: u64,
}

#[derive(Subcommand, Debug)]
enum Worker {
    /// One worker process (started by the program itself).
    Worker {
        #[arg(long)]
        url: String,
        /// The fleet's start, in ms since the Unix epoch.
        #[arg(long)]
        start_ms: u64,
        /// This worker's schedule offset, ms.
        #[arg(long)]
        offset_ms: u64,
        #[arg(long)]
        periods: u64,
        #[arg(long)]
        no_hold: bool,
    },
}

/// The job, as a job lock: one attempt, skipped when another worker holds it, and the key kept
/// 650 ms after the acquire.
#[distributed_lock(
    key = "job:report",
    manager = locks,
    ttl_ms = 10_000,
    wait_ms = 0,
    on_contended = "skip",
    hold_at_least_ms = 650
)]
async fn report(locks: &LockManager) -> Result<Option<()>, LockError> {
    tokio::time::sleep(JOB).await;
    Ok(Some(()))
}

/// The twin: the same job lock without the minimum hold.
#[distributed_lock(
    key = "job:report",
    manager = locks,
    ttl_ms = 10_000,
    wait_ms = 0,
    on_contended = "skip"
)]
async fn report_unheld(locks: &LockManager) -> Result<Option<()>, LockError> {
    tokio::time::sleep(JOB).await;
    Ok(Some(()))
}

fn now_ms() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.worker {
        Some(Worker::Worker {
            url,
            start_ms,
            offset_ms,
            periods,
            no_hold,
        }) => worker(&url, start_ms + offset_ms, periods, no_hold).await,
        None => fleet(cli.redis_url, cli.no_hold, cli.periods).await,
    };
    fleet::exit("scheduled_job", outcome)
}

/// One worker: from `first_ms` on, fires the job every period, `periods` times, and reports
/// `run <period>` or `skip <period>` for each.
async fn worker(url: &str, first_ms: u64, periods: u64, no_hold: bool) -> Result<(), BoxError> {
    let locks = LockManager::connect(url).await?;
    tokio::time::sleep(Duration::from_millis(first_ms.saturating_sub(now_ms()))).await;
    let mut schedule = tokio::time::interval(PERIOD);
    schedule.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for period in 0..periods {
        schedule.tick().await;
        let ran = if no_hold {
            report_unheld(&locks).await?
        } else {
            report(&locks).await?
        };
        println!("{} {period}", if ran.is_some() { "run" } else { "skip" });
    }
    locks.close().await?;
    println!("done");
    Ok(())
}

/// The fleet: three workers with offset schedules; counts the runs per period.
async fn fleet(redis_url: Option<String>, no_hold: bool, periods: u64) -> Result<(), BoxError> {
    let (url, _server) = fleet::redis(redis_url);
    // Time for the workers to start and connect before the first period.
    let start_ms = now_ms() + 700;
    let args: Vec<Vec<String>> = OFFSETS_MS
        .iter()
        .map(|offset| {
            let mut args = vec![
                "worker".to_owned(),
                format!("--url={url}"),
                format!("--start-ms={start_ms}"),
                format!("--offset-ms={offset}"),
                format!("--periods={periods}"),
            ];
            if no_hold {
                args.push("--no-hold".to_owned());
            }
            args
        })
        .collect();
    let mut workers = Fleet::start(&args)?;
    let mut runs = vec![0u32; usize::try_from(periods)?];
    let mut done = 0;
    let deadline = PERIOD * u32::try_from(periods)? + Duration::from_secs(10);
    while done < OFFSETS_MS.len() {
        let Some((index, line)) = workers.next(deadline).await else {
            return Err("a worker stopped reporting".into());
        };
        println!("worker {index} (offset {} ms): {line}", OFFSETS_MS[index]);
        if line == "done" {
            done += 1;
        } else if let Some(period) = line.strip_prefix("run ") {
            let period: usize = period.parse()?;
            *runs.get_mut(period).ok_or("a run outside the periods")? += 1;
        }
    }
    workers.finish(Duration::from_secs(2)).await;
    let total: u32 = runs.iter().sum();
    println!(
        "scheduled_job: hold={} periods={periods} runs={total} per_period={runs:?}",
        if no_hold { "off" } else { "on" }
    );
    let expected = if no_hold {
        u64::from(total) > periods
    } else {
        runs.iter().all(|&n| n == 1)
    };
    if expected {
        Ok(())
    } else {
        Err("the runs per period are not the expected ones".into())
    }
}
