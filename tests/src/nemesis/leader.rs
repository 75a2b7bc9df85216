//! The nemesis' leader workload: worker processes campaign for one leadership
//! ([`LockManager::campaign`]); the leader writes heartbeats with its term to SQLite, each
//! after checking `is_leader()` and preparing the row (100 ms, the window a pause hurts in).
//! The faults freeze the leader in that window past its TTL (`SIGSTOP`, then `SIGCONT`) or kill
//! it (`SIGKILL`, and a fresh worker in its place). Fenced, SQLite raises the stored term in the
//! write's transaction and refuses a lower one; the control writes without the check.
//!
//! The checker reads the heartbeats in commit order: a row whose term is below an earlier row's
//! is a stale write that landed while a newer leader was accepted (a violation: two processes
//! acted as leader of terms the resource accepted). Under lockcore there must be none; the
//! control must show some.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use lockcore::{LockManager, LockOptions};
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::BoxError;
use crate::RedisServer;
use crate::heartbeats::{create, heartbeat, stale_rows};

/// The leadership's lease.
const TTL: Duration = Duration::from_millis(600);
/// From a leader's check to its write.
const PREPARE: Duration = Duration::from_millis(100);
const KEY: &str = "nemesis:leader";

/// What to run.
#[derive(Debug, Clone)]
pub struct LeaderConfig {
    pub seconds: u64,
    /// Heartbeats without the term check.
    pub control: bool,
    pub workers: u32,
    pub seed: u64,
    /// The binary to run workers with (`<exe> leader-worker URL DB NAME [control]`).
    pub worker_exe: PathBuf,
}

/// What a run found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LeaderSummary {
    /// Heartbeats written.
    pub writes: u64,
    /// Heartbeats the term check refused.
    pub refused: u64,
    pub faults: u64,
    /// Heartbeats whose term was below an earlier heartbeat's: stale writes that landed.
    pub violations: u64,
    /// The longest time from a fault to the next leader's election, ms.
    pub max_recovery_ms: u64,
}

impl LeaderSummary {
    /// `nemesis: workload=leader ops=.. faults=.. violations=.. lost_updates=0 max_recovery_ms=..`
    pub fn last_line(&self) -> String {
        format!(
            "nemesis: workload=leader ops={} faults={} violations={} lost_updates=0 max_recovery_ms={}",
            self.writes + self.refused,
            self.faults,
            self.violations,
            self.max_recovery_ms
        )
    }
}

/// A worker process: campaigns, leads until deposed, campaigns again; until killed. Reports
/// `lead <term>`, `checked <term>`, `wrote <term>`, `refused <term>`, `lost <term>`.
///
/// # Errors
/// Bad arguments, or a failing manager or database.
pub fn worker_main(args: &[String]) -> Result<(), BoxError> {
    let [url, db, name, rest @ ..] = args else {
        return Err("usage: nemesis leader-worker URL DB NAME [control]".into());
    };
    let fenced = rest.first().map(String::as_str) != Some("control");
    let db = PathBuf::from(db);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let locks = LockManager::builder()
            .url(url)
            .process_label(name)
            .build()
            .await?;
        let opts = LockOptions::new(TTL).wait(Duration::MAX);
        // Bounded by the coordinator, which kills this process at the end of the run.
        loop {
            let leadership = locks.campaign(KEY, &opts).await?;
            let term = leadership.term();
            println!("lead {term}");
            while leadership.is_leader() {
                println!("checked {term}");
                tokio::time::sleep(PREPARE).await;
                let (db, name) = (db.clone(), name.clone());
                let wrote =
                    tokio::task::spawn_blocking(move || heartbeat(&db, term, &name, fenced))
                        .await??;
                println!("{} {term}", if wrote { "wrote" } else { "refused" });
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
            println!("lost {term}");
            drop(leadership);
        }
    })
}

/// The coordinator's view of one worker process.
struct Worker {
    child: Child,
}

fn spawn(
    config: &LeaderConfig,
    url: &str,
    db: &Path,
    index: usize,
    lines: &mpsc::UnboundedSender<(usize, String)>,
) -> Result<Worker, BoxError> {
    let mut command = Command::new(&config.worker_exe);
    command
        .arg("leader-worker")
        .arg(url)
        .arg(db)
        .arg(format!("w{index}"));
    if config.control {
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
    Ok(Worker { child })
}

fn pid_of(worker: &Worker) -> Option<rustix::process::Pid> {
    worker
        .child
        .id()
        .and_then(|pid| i32::try_from(pid).ok())
        .and_then(rustix::process::Pid::from_raw)
}

fn signal(worker: &Worker, signal: rustix::process::Signal) {
    if let Some(pid) = pid_of(worker) {
        let _ = rustix::process::kill_process(pid, signal);
    }
}

/// Runs the leader workload for `config.seconds` under faults and checks the heartbeats.
///
/// # Errors
/// When the run cannot be carried out (a worker or the database fails to start).
pub fn run(config: &LeaderConfig) -> Result<LeaderSummary, BoxError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(coordinate(config))
}

async fn coordinate(config: &LeaderConfig) -> Result<LeaderSummary, BoxError> {
    let server = RedisServer::start();
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("leader.db");
    create(&db)?;
    let (send, mut lines) = mpsc::unbounded_channel();
    let mut workers = Vec::new();
    for index in 0..usize::try_from(config.workers.max(2))? {
        workers.push(spawn(config, &server.url(), &db, index, &send)?);
    }
    let mut rng = fastrand::Rng::with_seed(config.seed);
    let mut summary = LeaderSummary::default();
    let end = Instant::now() + Duration::from_secs(config.seconds);
    let mut leader: Option<usize> = None;
    let mut fault_at: Option<Instant> = None;
    let mut checks_until_fault = rng.u32(2..6);
    // Bounded by `end`: every wait below is.
    while Instant::now() < end {
        let Ok(Some((index, line))) = tokio::time::timeout_at(end, lines.recv()).await else {
            break;
        };
        let (what, _term) = line.split_once(' ').unwrap_or((line.as_str(), ""));
        match what {
            "lead" => {
                leader = Some(index);
                if let Some(at) = fault_at.take() {
                    let ms = u64::try_from(at.elapsed().as_millis()).unwrap_or(u64::MAX);
                    summary.max_recovery_ms = summary.max_recovery_ms.max(ms);
                }
            }
            "wrote" => summary.writes += 1,
            "refused" => summary.refused += 1,
            "checked" if leader == Some(index) && fault_at.is_none() => {
                checks_until_fault = checks_until_fault.saturating_sub(1);
                if checks_until_fault > 0 {
                    continue;
                }
                checks_until_fault = rng.u32(2..6);
                summary.faults += 1;
                fault_at = Some(Instant::now());
                leader = None;
                if rng.u8(0..3) == 0 {
                    // A crash: SIGKILL, and a fresh worker in its place.
                    signal(&workers[index], rustix::process::Signal::KILL);
                    let _ = workers[index].child.wait().await;
                    workers[index] = spawn(config, &server.url(), &db, index, &send)?;
                } else {
                    // A pause past the TTL, between the leader's check and its write.
                    let pid = pid_of(&workers[index]);
                    if let Some(pid) = pid {
                        let _ = rustix::process::kill_process(pid, rustix::process::Signal::STOP);
                        tokio::spawn(async move {
                            tokio::time::sleep(TTL * 2).await;
                            let _ =
                                rustix::process::kill_process(pid, rustix::process::Signal::CONT);
                        });
                    }
                }
            }
            _ => {}
        }
    }
    for worker in &mut workers {
        signal(worker, rustix::process::Signal::CONT);
        let _ = worker.child.start_kill();
        let _ = worker.child.wait().await;
    }
    summary.violations = stale_rows(&db)?;
    Ok(summary)
}
