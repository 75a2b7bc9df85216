//! Benchmarks of lockcore against a raw redis-rs floor and the peer crates `rslock`,
//! `async-redis-lock` and `rlock`, all measured in the same run against private redis-server
//! processes on 127.0.0.1.
//!
//! ```text
//! cargo bench -p lockcore-benches                   # everything, ~3 min; writes benches/RESULTS.md
//! cargo bench -p lockcore-benches -- --quick        # short cells, a smoke run; writes nothing
//! cargo bench -p lockcore-benches -- --only b2,b3  # some of b1-b6
//! ```
//!
//! B1 uncontended acquire+release, B2 one hot key, B3 hand-off latency, B4 Redlock, B5 watchdog
//! cost, B6 `wait_for_replicas` and Redis Cluster.
//!
//! See `benches/README.md` for what each scenario measures and how.

mod b1;
mod b2;
mod b3;
mod b4;
mod b5;
mod b6;
mod lockers;
mod monitor;
mod monitor_line;
mod pin;
mod report;
mod results;
mod scenarios;
mod stats;
mod table;
mod tables;
mod targets;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Instant, SystemTime};

use clap::Parser;

use crate::lockers::Kind;
use crate::report::Env;
use crate::results::Results;
use crate::scenarios::Config;

/// Benchmarks lockcore against raw redis-rs and peer crates, on private redis-server processes.
#[derive(Debug, Parser)]
#[command(name = "lockcore-benches")]
struct Args {
    /// Short cells: a smoke run for development. Does not write RESULTS.md unless --out is given.
    #[arg(long)]
    quick: bool,
    /// Run only these scenarios (comma-separated): b1, b2, b3, b4, b5, b6.
    #[arg(long, value_delimiter = ',', value_parser = ["b1", "b2", "b3", "b4", "b5", "b6"])]
    only: Vec<String>,
    /// Write the report here (default: benches/RESULTS.md for a full run of all scenarios).
    #[arg(long)]
    out: Option<PathBuf>,
    /// The tokio runtime of the latency scenarios B1, B3, B4 and B6 (B2 and B5 always use the
    /// multi-thread runtime).
    #[arg(long, value_enum, default_value_t = Flavor::CurrentThread)]
    latency_runtime: Flavor,
    /// Do not pin the client to CPU 0 and the redis-servers to CPU 1.
    #[arg(long)]
    no_pin: bool,
    /// Passed by `cargo bench` to every bench target; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

/// A tokio runtime flavor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Flavor {
    /// One thread: the client's own cost, without cross-thread wake-ups.
    CurrentThread,
    /// One worker per core.
    MultiThread,
}

impl Flavor {
    fn describe(self) -> &'static str {
        match self {
            Flavor::CurrentThread => "current-thread",
            Flavor::MultiThread => "multi-thread",
        }
    }
}

/// Runs `fut` to completion on a fresh runtime of `flavor`; the runtime (and every task that
/// the scenario left behind) is gone when this returns.
fn block<F: std::future::Future>(flavor: Flavor, fut: F) -> Result<F::Output, String> {
    let mut builder = match flavor {
        Flavor::CurrentThread => tokio::runtime::Builder::new_current_thread(),
        Flavor::MultiThread => tokio::runtime::Builder::new_multi_thread(),
    };
    let runtime = builder
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a tokio runtime: {e}"))?;
    Ok(runtime.block_on(fut))
}

/// `kinds` after lockcore's semaphore row (B1 and B2 only: with 4 permits, B3's two
/// contenders never wait for each other).
fn with_semaphore(kinds: &[Kind]) -> Vec<Kind> {
    std::iter::once(Kind::LockcoreSemaphore)
        .chain(kinds.iter().copied())
        .collect()
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<ExitCode, String> {
    let lat = args.latency_runtime;
    let multi = Flavor::MultiThread;
    let mut cfg = if args.quick {
        Config::quick()
    } else {
        Config::full()
    };
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    if !args.no_pin {
        cfg.pin = pin::pin_client(cores);
        if cfg.pin.is_none() {
            eprintln!("note: not pinned (one CPU, or no `taskset`)");
        }
    }
    let wanted = |s: &str| args.only.is_empty() || args.only.iter().any(|o| o == s);
    let started = Instant::now();
    let load_before = load_average();
    let ours = [
        Kind::LockcoreHandoff,
        Kind::LockcoreFencingOff,
        Kind::Lockcore,
    ];
    let with = |front: &[Kind], back: &[Kind]| -> Vec<Kind> {
        front.iter().chain(&ours).chain(back).copied().collect()
    };
    let peers = [Kind::Rslock, Kind::AsyncRedisLock, Kind::Rlock];

    let mut results = Results {
        b1: None,
        b2: None,
        b3: None,
        b4: None,
        b5: None,
        b6: None,
    };
    if wanted("b1") {
        eprintln!("B1: uncontended acquire+release ...");
        results.b1 = Some(block(
            lat,
            b1::b1(
                &cfg,
                &with(
                    &[
                        Kind::Floor,
                        Kind::FloorNagle,
                        Kind::FloorFenced,
                        Kind::FloorFencedNagle,
                    ],
                    &with_semaphore(&peers),
                ),
            ),
        )?);
    }
    if wanted("b2") {
        eprintln!("B2: one hot key ...");
        results.b2 = Some(block(
            multi,
            b2::b2(&cfg, &with(&[], &with_semaphore(&peers))),
        )?);
    }
    if wanted("b3") {
        eprintln!("B3: hand-off latency ...");
        results.b3 = Some(block(lat, b3::b3(&cfg, &with(&[], &peers)))?);
    }
    if wanted("b4") {
        eprintln!("B4: Redlock N = 1, 3, 5 ...");
        results.b4 = Some(block(
            lat,
            b4::b4(
                &cfg,
                &[
                    Kind::Floor,
                    Kind::FloorNagle,
                    Kind::Lockcore,
                    Kind::Rslock,
                    Kind::AsyncRedisLock,
                    Kind::Rlock,
                ],
            ),
        )?);
    }
    if wanted("b5") {
        eprintln!("B5: watchdog cost ...");
        // Renewals do not depend on fencing: lockcore's default and backoff modes only.
        let kinds = [Kind::LockcoreHandoff, Kind::Lockcore];
        let kinds: Vec<Kind> = kinds.iter().chain(&peers).copied().collect();
        results.b5 = Some(block(multi, b5::b5(&cfg, &kinds))?);
    }
    if wanted("b6") {
        eprintln!("B6: wait_for_replicas, Redis Cluster ...");
        results.b6 = Some(block(lat, b6::b6(&cfg))?);
    }

    // The arguments after `--`; `cargo bench` adds `--bench` itself.
    let extra: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let mut args_text = if extra.is_empty() {
        String::new()
    } else {
        format!(" -- {}", extra.join(" "))
    };
    if args.quick {
        args_text.push_str(" (short cells: a smoke run, not a measurement)");
    }
    let env = Env {
        date: utc_now(),
        cores,
        pinning: cfg.pin.map_or_else(
            || "none".to_owned(),
            |p| {
                format!(
                    "client (all its threads) on CPU {}, every redis-server on CPU {} (`taskset`)",
                    p.client_cpu, p.server_cpu
                )
            },
        ),
        cpu: cpu_model(),
        kernel: read_trimmed("/proc/sys/kernel/osrelease"),
        redis: redis_version(),
        rustc: env!("BENCH_RUSTC_VERSION").to_owned(),
        release: !cfg!(debug_assertions),
        args: args_text,
        load_before,
        load_after: load_average(),
        duration: started.elapsed(),
        latency_runtime: lat.describe(),
    };
    let text = report::render(&env, &cfg, &results);
    println!("{text}");

    let out = args.out.or_else(|| {
        (!args.quick && args.only.is_empty())
            .then(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("RESULTS.md"))
    });
    if let Some(path) = out {
        std::fs::write(&path, &text)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path).map_or_else(|_| "?".to_owned(), |s| s.trim().to_owned())
}

fn load_average() -> String {
    let s = read_trimmed("/proc/loadavg");
    s.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|v| v.trim_start_matches([' ', '\t', ':']).trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned())
}

/// `redis-server --version`: "Redis server v=7.0.15 sha=..." → "7.0.15".
fn redis_version() -> String {
    std::process::Command::new("redis-server")
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| {
            s.split_whitespace()
                .find_map(|w| w.strip_prefix("v="))
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "(version unknown)".to_owned())
}

/// "2026-05-01 12:34" in UTC, from the system clock.
fn utc_now() -> String {
    let stamp = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
    // "2026-05-01T12:34:56Z" -> "2026-05-01 12:34"
    stamp.get(..16).unwrap_or(&stamp).replacen('T', " ", 1)
}
