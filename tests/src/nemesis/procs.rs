//! The worker processes of the one-key workloads (`leader`, `semaphore`, `rwlock`) and the
//! nemesis that hits them: each worker (`<exe> <subcommand> URL DB NAME [control]`) prints
//! its steps on stdout, one per line; the coordinator collects them in a ledger, stamped with
//! the worker's index. When a worker reports `checked ..` (it checked its lease and is about
//! to write), every few such lines, the nemesis freezes it past the TTL (`SIGSTOP`, then
//! `SIGCONT` two TTLs later) or kills it (`SIGKILL`, a `killed <ns>` line in its name, and a
//! fresh worker in its place).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::BoxError;
use crate::history::now_ns;

/// What to run.
#[derive(Debug, Clone)]
pub struct ProcConfig {
    pub seconds: u64,
    /// The naive control instead of lockcore.
    pub control: bool,
    pub workers: u32,
    pub seed: u64,
    /// The binary to run workers with (`<exe> <subcommand> URL DB NAME [control]`).
    pub worker_exe: PathBuf,
}

/// What the coordinator saw.
#[derive(Debug, Default)]
pub(super) struct Ledger {
    /// Every worker's lines, in arrival order, with the worker's index.
    pub lines: Vec<(usize, String)>,
    pub faults: u64,
    /// The longest time from a fault to the next entry line, ms.
    pub max_recovery_ms: u64,
}

/// One run: its workers, what they report and where.
pub(super) struct Run<'a> {
    pub config: &'a ProcConfig,
    /// The worker subcommand (`leader-worker`, ...).
    pub subcommand: &'static str,
    pub url: String,
    pub db: &'a Path,
    /// The lease TTL the workers use (a pause lasts two).
    pub ttl: Duration,
    /// The first word of a line that reports a lease taken (ends a recovery).
    pub entries: &'a [&'a str],
}

fn spawn(
    run: &Run<'_>,
    index: usize,
    lines: &mpsc::UnboundedSender<(usize, String)>,
) -> Result<Child, BoxError> {
    let mut command = Command::new(&run.config.worker_exe);
    command
        .arg(run.subcommand)
        .arg(&run.url)
        .arg(run.db)
        .arg(format!("w{index}"));
    if run.config.control {
        command.arg("control");
    }
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = child.stdout.take().ok_or("worker without stdout")?;
    let lines = lines.clone();
    tokio::spawn(async move {
        let mut out = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = out.next_line().await {
            if lines.send((index, line)).is_err() {
                break;
            }
        }
    });
    Ok(child)
}

fn pid_of(child: &Child) -> Option<rustix::process::Pid> {
    child
        .id()
        .and_then(|pid| i32::try_from(pid).ok())
        .and_then(rustix::process::Pid::from_raw)
}

fn signal(child: &Child, signal: rustix::process::Signal) {
    if let Some(pid) = pid_of(child) {
        let _ = rustix::process::kill_process(pid, signal);
    }
}

/// Runs the workers for `config.seconds` under faults; returns their ledger.
///
/// # Errors
/// When a worker cannot be started.
pub(super) async fn drive(run: &Run<'_>) -> Result<Ledger, BoxError> {
    let (send, mut lines) = mpsc::unbounded_channel();
    let mut workers = Vec::new();
    for index in 0..usize::try_from(run.config.workers.max(2))? {
        workers.push(spawn(run, index, &send)?);
    }
    let mut rng = fastrand::Rng::with_seed(run.config.seed);
    let mut ledger = Ledger::default();
    let end = Instant::now() + Duration::from_secs(run.config.seconds);
    let mut fault_at: Option<Instant> = None;
    let mut checks_until_fault = rng.u32(2..6);
    // Bounded by `end`: every wait below is.
    while Instant::now() < end {
        let Ok(Some((index, line))) = tokio::time::timeout_at(end, lines.recv()).await else {
            break;
        };
        let what = line.split(' ').next().unwrap_or("");
        if run.entries.contains(&what)
            && let Some(at) = fault_at.take()
        {
            let ms = u64::try_from(at.elapsed().as_millis()).unwrap_or(u64::MAX);
            ledger.max_recovery_ms = ledger.max_recovery_ms.max(ms);
        }
        let checked = what == "checked";
        ledger.lines.push((index, line));
        if !checked || fault_at.is_some() {
            continue;
        }
        checks_until_fault = checks_until_fault.saturating_sub(1);
        if checks_until_fault > 0 {
            continue;
        }
        checks_until_fault = rng.u32(2..6);
        ledger.faults += 1;
        fault_at = Some(Instant::now());
        if rng.u8(0..3) == 0 {
            // A crash: SIGKILL, and a fresh worker in its place.
            signal(&workers[index], rustix::process::Signal::KILL);
            let _ = workers[index].wait().await;
            ledger.lines.push((index, format!("killed {}", now_ns())));
            workers[index] = spawn(run, index, &send)?;
        } else if let Some(pid) = pid_of(&workers[index]) {
            // A pause past the TTL, between the worker's check and its write.
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::STOP);
            let pause = run.ttl * 2;
            tokio::spawn(async move {
                tokio::time::sleep(pause).await;
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::CONT);
            });
        }
    }
    for worker in &mut workers {
        signal(worker, rustix::process::Signal::CONT);
        let _ = worker.start_kill();
        let _ = worker.wait().await;
    }
    Ok(ledger)
}

/// A worker's arguments: `URL DB NAME [control]`.
pub(super) struct WorkerArgs {
    pub url: String,
    pub db: PathBuf,
    pub name: String,
    /// Not `control`.
    pub fenced: bool,
    pub locks: lockcore::LockManager,
}

/// A current-thread runtime with time and I/O (a worker's, or a coordinator's).
///
/// # Errors
/// When the runtime cannot be built.
pub(super) fn current_thread() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

/// Parses a worker's arguments, connects its manager and runs `body`.
///
/// # Errors
/// Bad arguments, or what the manager or `body` fails with.
pub(super) fn run_worker<F, Fut>(args: &[String], subcommand: &str, body: F) -> Result<(), BoxError>
where
    F: FnOnce(WorkerArgs) -> Fut,
    Fut: Future<Output = Result<(), BoxError>>,
{
    let [url, db, name, rest @ ..] = args else {
        return Err(format!("usage: nemesis {subcommand} URL DB NAME [control]").into());
    };
    let fenced = rest.first().map(String::as_str) != Some("control");
    current_thread()?.block_on(async {
        let locks = lockcore::LockManager::builder()
            .url(url)
            .process_label(name)
            .build()
            .await?;
        body(WorkerArgs {
            url: url.clone(),
            db: PathBuf::from(db),
            name: name.clone(),
            fenced,
            locks,
        })
        .await
    })
}
