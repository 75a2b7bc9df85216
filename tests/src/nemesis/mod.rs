//! The nemesis run: worker processes lock keys and increment fenced resources while faults
//! are injected, then a checker reads the merged history (its last line, `nemesis: ops=.. violations=..`, is what CI reads).
//!
//! The binary (`cargo run --release -p lockcore-tests --bin nemesis -- --seconds N`) sets up
//! network namespaces when it may and re-executes itself inside the server's namespace; the
//! coordinator ([`run`]) starts the server, a fault proxy per worker and the workers (the same
//! binary, `nemesis worker`), applies a seeded schedule of faults, waits for the workers, checks
//! what is left on the server, and checks the history.

mod beliefs;
pub mod checker;
pub mod family;
pub mod faults;
pub mod fleet;
pub mod leader;
mod naive;
pub mod netns;
pub mod plot;
pub mod procs;
pub mod report;
pub mod resources;
pub mod workload;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use faults::{Deck, FaultKind, FaultRecord};
use fleet::{Fleet, Network};
use workload::{KEYS, PREFIX, TTL_MS, WAIT_MS, WorkerSpec};

use crate::history::{duration_ns, now_ns, read_histories};

/// The error of a run that could not be carried out (not a violation: those are findings).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What to run.
#[derive(Debug, Clone)]
pub struct Config {
    /// How long the workers run.
    pub seconds: u64,
    /// The naive lock instead of lockcore.
    pub control: bool,
    /// AOF with `appendfsync always` (off: the known limit of a restart without persistence).
    pub persistence: bool,
    /// Worker processes (at least 3: the fewest that make a fault on one of them a minority).
    pub workers: u32,
    /// Tasks per worker.
    pub tasks: u32,
    /// The schedule's seed.
    pub seed: u64,
    /// Draw only these kinds (all when empty).
    pub faults: Vec<FaultKind>,
    /// The binary to run workers with (`<exe> worker --spec JSON`).
    pub worker_exe: PathBuf,
    /// How the workers reach the server.
    pub network: Network,
    /// Draw the timeline here.
    pub plot: Option<PathBuf>,
}

/// What a run found.
#[derive(Debug)]
pub struct Summary {
    /// The checker's findings.
    pub findings: checker::Findings,
    /// The faults as applied.
    pub faults: Vec<FaultRecord>,
    /// Keys, queue entries and subscriptions left on the server at the end.
    pub leftovers: Vec<String>,
    /// History lines that did not parse (torn by a kill).
    pub torn_lines: usize,
    /// The run was cut short by Ctrl-C.
    pub interrupted: bool,
}

impl Summary {
    /// Violations: the checker's, plus every leftover.
    pub fn violations(&self) -> usize {
        self.findings.violations() + self.leftovers.len()
    }

    /// The largest recovery, in ms; a fault after which no write was accepted until the end
    /// counts as recovering at the end.
    pub fn max_recovery_ms(&self, end_ns: u64) -> u64 {
        self.findings
            .recovery_ms
            .iter()
            .zip(&self.faults)
            .map(|((_, ms), f)| ms.unwrap_or(end_ns.saturating_sub(f.heal_ns) / 1_000_000))
            .max()
            .unwrap_or(0)
    }
}

/// Runs the coordinator on a runtime of its own; returns the summary and the end of the run
/// (in [`now_ns`]).
///
/// # Errors
/// When the server, a proxy or a worker cannot be started, or the history cannot be read.
pub fn run(config: &Config) -> Result<(Summary, u64), BoxError> {
    runtime()?.block_on(coordinate(config))
}

/// The runtime of a coordinator or a worker process: two worker threads (this machine has two
/// cores), time and I/O.
///
/// # Errors
/// When the runtime cannot be built.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
}

async fn coordinate(config: &Config) -> Result<(Summary, u64), BoxError> {
    let dir = tempfile::Builder::new()
        .prefix("lockcore-nemesis")
        .tempdir()?;
    // `NEMESIS_KEEP_DIR=1` keeps the histories, worker logs and database for a look.
    let (dir, _guard) = if std::env::var_os("NEMESIS_KEEP_DIR").is_some() {
        let kept = dir.keep();
        eprintln!("nemesis: keeping {}", kept.display());
        (kept, None)
    } else {
        (dir.path().to_owned(), Some(dir))
    };
    let db = dir.join("resources.sqlite");
    resources::init_db(&db, &KEYS)?;
    let server_args: &[&str] = if config.persistence {
        &["--appendonly", "yes", "--appendfsync", "always"]
    } else {
        &[]
    };
    let mut fleet = Fleet::start(
        server_args,
        config.workers,
        config.network.clone(),
        config.worker_exe.clone(),
        dir.clone(),
    )
    .await?;
    let mut rng = fastrand::Rng::with_seed(config.seed);
    let start_ns = now_ns();
    let until_ns = start_ns + duration_ns(Duration::from_secs(config.seconds));
    for process in 0..config.workers {
        let spec = WorkerSpec {
            process,
            incarnation: 0,
            url: fleet.worker_url(process),
            tasks: config.tasks,
            until_ns,
            history: dir.join(format!("history-{process}-0.jsonl")),
            db: db.clone(),
            control: config.control,
            seed: rng.u64(..),
        };
        fleet.spawn(spec)?;
    }

    let (faults, interrupted) = schedule(&mut fleet, config, &mut rng, until_ns).await?;
    let end_ns = now_ns().max(until_ns);
    // Workers stop starting operations at `until_ns`; the last ones end within a wait budget
    // and a long body.
    fleet
        .finish(Duration::from_millis(WAIT_MS + 3 * TTL_MS + 3_000))
        .await;
    for proxy in &fleet.proxies {
        proxy.heal();
    }
    let leftovers = leftovers(&mut fleet).await?;

    let mut finals = BTreeMap::new();
    for key in KEYS {
        let counter = fleet.counter(key).await?;
        finals.insert(("counter".to_owned(), key.to_owned()), counter);
    }
    for (key, seen) in resources::row_values(&db)? {
        finals.insert(("row".to_owned(), key), seen);
    }
    let (events, torn_lines) = read_histories(&fleet.histories())?;
    let findings = checker::check(&events, &faults, &finals, end_ns);
    if let Some(path) = &config.plot
        && let Err(e) = plot::draw(path, &findings.leases, &faults, start_ns, end_ns)
    {
        eprintln!("nemesis: plot {}: {e}", path.display());
    }
    Ok((
        Summary {
            findings,
            faults,
            leftovers,
            torn_lines,
            interrupted,
        },
        end_ns,
    ))
}

/// Applies faults from a shuffled deck until 4 s before the end, one at a time with 1–2 s of
/// calm in between; stops early on Ctrl-C.
async fn schedule(
    fleet: &mut Fleet,
    config: &Config,
    rng: &mut fastrand::Rng,
    until_ns: u64,
) -> Result<(Vec<FaultRecord>, bool), BoxError> {
    let mut deck = Deck::new(&config.faults);
    let mut faults = Vec::new();
    let calm_at_end = duration_ns(Duration::from_secs(4));
    let mut pause = Duration::from_millis(1_500);
    // Bounded by the end time, and by a count.
    for _ in 0..10_000 {
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            _ = tokio::signal::ctrl_c() => return Ok((faults, true)),
        }
        if now_ns() + calm_at_end > until_ns {
            break;
        }
        let kind = deck.draw(rng);
        let applied = faults::apply(fleet, kind, rng)
            .await
            .map_err(|e| format!("fault {}: {e}", kind.name()))?;
        faults.push(applied);
        pause = Duration::from_millis(rng.u64(1_000..2_000));
    }
    let left = Duration::from_nanos(until_ns.saturating_sub(now_ns()));
    tokio::select! {
        () = tokio::time::sleep(left) => Ok((faults, false)),
        _ = tokio::signal::ctrl_c() => Ok((faults, true)),
    }
}

/// Lock keys, queue entries and subscriptions still on the server, after giving leases time
/// to expire (bounded: two TTLs and a second, polled every 100 ms).
async fn leftovers(fleet: &mut Fleet) -> Result<Vec<String>, BoxError> {
    let mut found = Vec::new();
    for _ in 0..(2 * TTL_MS + 1_000) / 100 {
        found.clear();
        for pattern in [&format!("{PREFIX}*"), "*__waitq__*", "*__waiters__*"] {
            let keys: Vec<String> = fleet.control(redis::cmd("KEYS").arg(pattern)).await?;
            found.extend(
                keys.into_iter()
                    .filter(|k| !k.contains("__fencing_counter__")),
            );
        }
        let channels: Vec<String> = fleet.control(redis::cmd("PUBSUB").arg("CHANNELS")).await?;
        found.extend(channels.into_iter().map(|c| format!("channel {c}")));
        let patterns: i64 = fleet.control(redis::cmd("PUBSUB").arg("NUMPAT")).await?;
        if patterns > 0 {
            found.push(format!("{patterns} pattern subscriptions"));
        }
        found.sort();
        found.dedup();
        if found.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(found)
}
