//! The nemesis run: `cargo run --release -p lockcore-tests --bin nemesis --
//! --seconds N [--control] [--no-persistence] [--plot FILE.png] [--seed S]`.
//!
//! As root, where `ip netns` works, the run puts the server and every worker in network
//! namespaces of their own and re-executes itself inside the server's; elsewhere (or with
//! `--no-netns`) workers connect over loopback and partitions go through the fault proxies.
//! `nemesis worker --spec JSON` is a worker process (the coordinator starts those).
//!
//! The last line of the output is
//! `nemesis: ops=<n> faults=<n> violations=<n> lost_updates=<n> max_recovery_ms=<n>`. The exit
//! code is 0 when the run matches what its mode must show: no violation and no lost update
//! under lockcore, violations under `--control`; `--no-persistence` reports the known limit
//! and exits 0 either way.
//!
//! `--workload leader` runs the leader workload instead (`nemesis::leader`: campaigning
//! workers, fenced SQLite heartbeats, the leader paused past its TTL or killed between its
//! check and its write; its last line starts `nemesis: workload=leader`);
//! `nemesis leader-worker ..` is one of its workers. `--workload semaphore` and `--workload
//! rwlock` run the share workloads the same way (`nemesis::family`: permits of a semaphore of
//! 3 with fenced rows, readers and writers of a read-write lock with a fenced counter; workers
//! `nemesis semaphore-worker ..`, `nemesis rwlock-worker ..`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use lockcore_tests::nemesis::family::{self, Family};
use lockcore_tests::nemesis::fleet::Network;
use lockcore_tests::nemesis::procs::ProcConfig;
use lockcore_tests::nemesis::workload::{WorkerSpec, worker_main};
use lockcore_tests::nemesis::{self, BoxError, Config, netns, report};

/// A one-key workload's worker process.
type WorkerMain = fn(&[String]) -> Result<(), BoxError>;

/// The nemesis run's command line.
#[derive(Debug, Parser)]
#[command(name = "nemesis", about = "A history-checked nemesis run of lockcore")]
struct Args {
    /// How long the workload runs, in seconds.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Run the naive lock (plain DEL release, no fencing): the checker must report violations.
    #[arg(long)]
    control: bool,
    /// No AOF: a server restart loses locks, fences and counters (the known limit).
    #[arg(long)]
    no_persistence: bool,
    /// Draw the timeline to this PNG file.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// The schedule's seed (random when not given; printed either way).
    #[arg(long)]
    seed: Option<u64>,
    /// Worker processes.
    #[arg(long, default_value_t = 3)]
    workers: u32,
    /// Tasks per worker.
    #[arg(long, default_value_t = 4)]
    tasks: u32,
    /// Partitions through the fault proxy instead of network namespaces.
    #[arg(long)]
    no_netns: bool,
    /// The workload: `locks` (keys and fenced counters, the default), `leader` (leader
    /// election with fenced heartbeats), `semaphore` (3 permits, fenced rows) or `rwlock`
    /// (readers and writers, a fenced counter); the last three loopback only, no persistence
    /// option.
    #[arg(long, default_value = "locks")]
    workload: String,
    /// Internal: this process runs inside the run's server namespace, with this prefix.
    #[arg(long, hide = true)]
    netns_prefix: Option<String>,
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some("worker") {
        return match worker(&argv[2..]) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("nemesis worker: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let one_key_worker: Option<WorkerMain> = match argv.get(1).map(String::as_str) {
        Some("leader-worker") => Some(nemesis::leader::worker_main),
        Some("semaphore-worker") => Some(family::semaphore_worker),
        Some("rwlock-worker") => Some(family::rwlock_worker),
        _ => None,
    };
    if let Some(worker) = one_key_worker {
        return match worker(&argv[2..]) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("nemesis {}: {e}", argv[1]);
                ExitCode::FAILURE
            }
        };
    }
    let args = Args::parse();
    if ["leader", "semaphore", "rwlock"].contains(&args.workload.as_str()) {
        return one_key(&args).unwrap_or_else(|e| {
            eprintln!("nemesis: {e}");
            ExitCode::FAILURE
        });
    }
    match coordinate(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("nemesis: {e}");
            ExitCode::FAILURE
        }
    }
}

fn worker(args: &[String]) -> Result<(), BoxError> {
    let [flag, json] = args else {
        return Err("usage: nemesis worker --spec JSON".into());
    };
    if flag != "--spec" {
        return Err(format!("expected `--spec`, found `{flag}`").into());
    }
    let spec: WorkerSpec = serde_json::from_str(json)?;
    worker_main(spec)
}

/// The one-key workloads (`leader`, `semaphore`, `rwlock`): no violation under lockcore,
/// violations under `--control`.
fn one_key(args: &Args) -> Result<ExitCode, BoxError> {
    let seed = args.seed.unwrap_or_else(|| fastrand::u64(..));
    println!("nemesis: seed {seed}");
    let config = ProcConfig {
        seconds: args.seconds,
        control: args.control,
        workers: args.workers.max(2),
        seed,
        worker_exe: std::env::current_exe()?,
    };
    let (line, violations) = match args.workload.as_str() {
        "leader" => {
            let summary = nemesis::leader::run(&config)?;
            (summary.last_line(), summary.violations)
        }
        name => {
            let family = if name == "semaphore" {
                Family::Semaphore
            } else {
                Family::RwLock
            };
            let summary = family::run(family, &config)?;
            (summary.last_line(), summary.violations())
        }
    };
    println!("{line}");
    let as_expected = if config.control {
        violations > 0
    } else {
        violations == 0
    };
    Ok(if as_expected {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn coordinate(args: Args) -> Result<ExitCode, BoxError> {
    let exe = std::env::current_exe()?;
    let network = match &args.netns_prefix {
        Some(prefix) => Network::Namespaces(prefix.clone()),
        None if args.no_netns => Network::Loopback,
        None => {
            let prefix = netns::prefix_for(std::process::id());
            let created = netns::probe().and_then(|()| {
                netns::Namespaces::create(&prefix, args.workers.max(1)).map_err(|e| e.to_string())
            });
            match created {
                Ok(namespaces) => return outer(&args, &exe, namespaces),
                Err(e) => {
                    println!(
                        "netns: not available here ({e}); partitions go through the fault proxy"
                    );
                    Network::Loopback
                }
            }
        }
    };
    let seed = args.seed.unwrap_or_else(|| fastrand::u64(..));
    println!("nemesis: seed {seed}");
    let config = Config {
        seconds: args.seconds,
        control: args.control,
        persistence: !args.no_persistence,
        workers: args.workers.max(1),
        tasks: args.tasks.max(1),
        seed,
        faults: Vec::new(),
        worker_exe: exe,
        network,
        plot: args.plot.clone(),
    };
    let (summary, end_ns) = nemesis::run(&config)?;
    print!("{}", report::table(&summary, &config, end_ns));
    println!("{}", report::last_line(&summary, end_ns));
    let clean = summary.violations() == 0 && summary.findings.lost_updates == 0;
    let as_expected = if config.control {
        summary.violations() > 0
    } else {
        clean || !config.persistence
    };
    Ok(if as_expected {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Runs this binary again inside the server's namespace, then deletes the namespaces (also on
/// Ctrl-C and on a run that outlives its bound).
fn outer(
    args: &Args,
    exe: &std::path::Path,
    namespaces: netns::Namespaces,
) -> Result<ExitCode, BoxError> {
    let prefix = namespaces.prefix().to_owned();
    println!(
        "netns: server in {}, workers in {}..{} (veth 10.231.<i>.1 <-> 10.231.<i>.2)",
        netns::server_ns(&prefix),
        netns::worker_ns(&prefix, 0),
        netns::worker_ns(&prefix, args.workers.max(1) - 1)
    );
    let mut inner: Vec<String> = std::env::args().skip(1).collect();
    inner.extend(["--netns-prefix".to_owned(), prefix.clone()]);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let bound = Duration::from_secs(args.seconds + 90);
    let code = runtime.block_on(async {
        let mut child = tokio::process::Command::new("ip")
            .args(["netns", "exec", &netns::server_ns(&prefix)])
            .arg(exe)
            .args(&inner)
            .kill_on_drop(true)
            .spawn()?;
        tokio::select! {
            status = child.wait() => Ok::<_, BoxError>(status?.code().unwrap_or(1)),
            _ = tokio::signal::ctrl_c() => {
                eprintln!("nemesis: interrupted; cleaning up the namespaces");
                Ok(130)
            }
            () = tokio::time::sleep(bound) => {
                eprintln!("nemesis: the run outlived its bound of {bound:?}; stopped");
                Ok(1)
            }
        }
    })?;
    drop(runtime);
    drop(namespaces);
    Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
}
