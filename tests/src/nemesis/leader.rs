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

use std::time::Duration;

use lockcore::LockOptions;

use super::BoxError;
use super::procs::{ProcConfig, Run, current_thread, drive, run_worker};
use crate::RedisServer;
use crate::heartbeats::{create, heartbeat, stale_rows};

/// The leadership's lease.
const TTL: Duration = Duration::from_millis(600);
/// From a leader's check to its write.
const PREPARE: Duration = Duration::from_millis(100);
const KEY: &str = "nemesis:leader";

/// What to run (`control`: heartbeats without the term check).
pub type LeaderConfig = ProcConfig;

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
    run_worker(args, "leader-worker", |w| async move {
        let opts = LockOptions::new(TTL).wait(Duration::MAX);
        // Bounded by the coordinator, which kills this process at the end of the run.
        loop {
            let leadership = w.locks.campaign(KEY, &opts).await?;
            let term = leadership.term();
            println!("lead {term}");
            while leadership.is_leader() {
                println!("checked {term}");
                tokio::time::sleep(PREPARE).await;
                let (db, name, fenced) = (w.db.clone(), w.name.clone(), w.fenced);
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

/// Runs the leader workload for `config.seconds` under faults and checks the heartbeats.
///
/// # Errors
/// When the run cannot be carried out (a worker or the database fails to start).
pub fn run(config: &LeaderConfig) -> Result<LeaderSummary, BoxError> {
    current_thread()?.block_on(coordinate(config))
}

async fn coordinate(config: &LeaderConfig) -> Result<LeaderSummary, BoxError> {
    let server = RedisServer::start();
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("leader.db");
    create(&db)?;
    let ledger = drive(&Run {
        config,
        subcommand: "leader-worker",
        url: server.url(),
        db: &db,
        ttl: TTL,
        entries: &["lead"],
    })
    .await?;
    let count = |word: &str| {
        let lines = ledger.lines.iter();
        lines
            .filter(|(_, l)| l.split(' ').next() == Some(word))
            .count() as u64
    };
    Ok(LeaderSummary {
        writes: count("wrote"),
        refused: count("refused"),
        faults: ledger.faults,
        violations: stale_rows(&db)?,
        max_recovery_ms: ledger.max_recovery_ms,
    })
}
