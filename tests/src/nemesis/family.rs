//! The nemesis' share workloads, on one key each and the leader workload's faults
//! ([`procs`](super::procs): a worker paused past its TTL between its check and its write, or
//! killed there):
//!
//! - `semaphore`: workers take permits of `semaphore(key, 3)`; each holder writes a row with
//!   its fencing token to SQLite, fenced for 3 slots (a token that 3 newer rows overtook is
//!   refused, [`heartbeat_within`]). The checker asserts that at no instant more than 3
//!   holders believe they hold (an entry to the release or the guard's deadline, by the
//!   holder's clock; a killed holder's belief ends with it), and that no stale row landed.
//!   The control is a naive counter semaphore: `GET`, then `INCR` when below 3 (check, then
//!   act), `DECR` to leave, no lease and no fence.
//! - `rwlock`: workers take the read or the write lock of `rw_lock(key)` (a coin toss each
//!   time); a writer claims a counter (raises its term to its token) as it reads it, then
//!   writes it plus one, fenced by its token. The
//!   checker asserts that no reader's belief overlaps a writer's (nor two writers'), and that
//!   no write was lost (the counter equals the number of writes that landed). The control:
//!   writers take a naive lease (`SET NX PX`, `DEL` release, no fence), readers take none.
//!
//! Each worker reports `enter <role> <token> <start_ns> <deadline_ns>`, `checked <token>`,
//! `wrote <token>` or `refused <token>`, `exit <end_ns> <deadline_ns>`, in
//! [`now_ns`](crate::history::now_ns) (the machine's monotonic clock, shared by its processes).

use std::path::Path;
use std::time::Duration;

use lockcore::{LockGuard, LockOptions};
use redis::aio::MultiplexedConnection;
use rusqlite::{Connection, TransactionBehavior};

use super::BoxError;
use super::beliefs::{beliefs, crowding, writer_overlaps};
use super::procs::{ProcConfig, Run, WorkerArgs, current_thread, drive, run_worker};
use crate::RedisServer;
use crate::heartbeats::{create, heartbeat_within, stale_rows_within};
use crate::history::{duration_ns, now_ns};

/// A permit's or a share's lease.
const TTL: Duration = Duration::from_millis(600);
/// From a holder's check to its write.
const PREPARE: Duration = Duration::from_millis(100);
/// The semaphore's permits.
pub const PERMITS: u32 = 3;
const KEY: &str = "nemesis:family";
const NAIVE_COUNT: &str = "nemesis-naive:count";
const NAIVE_SEQ: &str = "nemesis-naive:seq";

/// The two workloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Semaphore,
    RwLock,
}

impl Family {
    /// `semaphore` or `rwlock`.
    pub fn name(self) -> &'static str {
        match self {
            Family::Semaphore => "semaphore",
            Family::RwLock => "rwlock",
        }
    }

    /// The worker subcommand of the nemesis binary.
    pub fn subcommand(self) -> &'static str {
        match self {
            Family::Semaphore => "semaphore-worker",
            Family::RwLock => "rwlock-worker",
        }
    }
}

/// What a run found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FamilySummary {
    pub workload: &'static str,
    /// Fenced writes that landed.
    pub writes: u64,
    /// Writes the fence refused.
    pub refused: u64,
    pub faults: u64,
    /// The most holders that believed they held at once (permits, or readers and writers).
    pub most_inside: u64,
    /// Entries that made more than [`PERMITS`] holders (semaphore), or overlaps of a writer
    /// with another holder (rwlock).
    pub overlaps: u64,
    /// Rows that landed below the [`PERMITS`]-th newest earlier row (semaphore).
    pub stale_writes: u64,
    /// Writes that landed but are missing from the counter (rwlock).
    pub lost_writes: u64,
    /// The longest time from a fault to the next entry, ms.
    pub max_recovery_ms: u64,
}

impl FamilySummary {
    /// Overlaps, stale writes and lost writes.
    pub fn violations(&self) -> u64 {
        self.overlaps + self.stale_writes + self.lost_writes
    }

    /// `nemesis: workload=.. ops=.. faults=.. violations=.. lost_updates=.. max_recovery_ms=..`
    pub fn last_line(&self) -> String {
        format!(
            "nemesis: workload={} ops={} faults={} violations={} lost_updates={} max_recovery_ms={} most_inside={} overlaps={} stale_writes={} refused={}",
            self.workload,
            self.writes + self.refused,
            self.faults,
            self.violations(),
            self.lost_writes,
            self.max_recovery_ms,
            self.most_inside,
            self.overlaps,
            self.stale_writes,
            self.refused,
        )
    }
}

/// A guard's deadline in [`now_ns`].
fn deadline_ns(guard: &LockGuard) -> u64 {
    let now = tokio::time::Instant::now();
    let at = now_ns();
    let deadline = guard.deadline();
    if deadline >= now {
        at.saturating_add(duration_ns(deadline - now))
    } else {
        at.saturating_sub(duration_ns(now - deadline))
    }
}

async fn query<T: redis::FromRedisValue>(
    con: &mut MultiplexedConnection,
    cmd: &redis::Cmd,
) -> Result<T, BoxError> {
    Ok(cmd.query_async(con).await?)
}

/// What a holder holds: a lockcore guard, or the control's naive hold.
enum Hold {
    Guard(LockGuard),
    /// Naive: what to undo on leaving (a command), if anything.
    Naive(Option<redis::Cmd>),
}

/// The control's semaphore: `GET` the count, `INCR` it when below the permits (retried every
/// 20 ms, bounded), `DECR` on leaving. The token is an `INCR` of a sequence.
async fn naive_permit(con: &mut MultiplexedConnection) -> Result<(u64, Hold), BoxError> {
    for _ in 0..100_000 {
        let count: Option<u32> = query(con, redis::cmd("GET").arg(NAIVE_COUNT)).await?;
        if count.unwrap_or(0) < PERMITS {
            let _: i64 = query(con, redis::cmd("INCR").arg(NAIVE_COUNT)).await?;
            let token: u64 = query(con, redis::cmd("INCR").arg(NAIVE_SEQ)).await?;
            let mut leave = redis::cmd("DECR");
            leave.arg(NAIVE_COUNT);
            return Ok((token, Hold::Naive(Some(leave))));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err("the naive semaphore stayed full".into())
}

/// The control's write lock: `SET NX PX` (retried every 20 ms, bounded), `DEL` on leaving.
async fn naive_write(con: &mut MultiplexedConnection) -> Result<(u64, Hold), BoxError> {
    let ttl = u64::try_from(TTL.as_millis())?;
    for _ in 0..100_000 {
        let set: Option<String> = query(
            con,
            redis::cmd("SET")
                .arg(KEY)
                .arg("naive")
                .arg("NX")
                .arg("PX")
                .arg(ttl),
        )
        .await?;
        if set.is_some() {
            let token: u64 = query(con, redis::cmd("INCR").arg(NAIVE_SEQ)).await?;
            let mut leave = redis::cmd("DEL");
            leave.arg(KEY);
            return Ok((token, Hold::Naive(Some(leave))));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err("the naive write lock stayed taken".into())
}

/// Creates the workloads' tables: the heartbeats, and the rwlock's counter (`value`, the
/// token that wrote it last, and how many writes landed).
fn create_db(db: &Path) -> Result<(), BoxError> {
    create(db)?;
    Connection::open(db)?.execute_batch(
        "CREATE TABLE counter (id INTEGER PRIMARY KEY, value INTEGER NOT NULL, term INTEGER NOT NULL, writes INTEGER NOT NULL);
         INSERT INTO counter VALUES (1, 0, 0, 0);",
    )?;
    Ok(())
}

fn open(db: &Path) -> Result<Connection, BoxError> {
    let conn = Connection::open(db)?;
    conn.busy_timeout(Duration::from_secs(2))?;
    Ok(conn)
}

/// The counter's value and the number of writes that landed.
fn counter(db: &Path) -> Result<(i64, i64), BoxError> {
    let row = open(db)?.query_row("SELECT value, writes FROM counter WHERE id = 1", [], |r| {
        Ok((r.get(0)?, r.get(1)?))
    })?;
    Ok(row)
}

/// Claims the counter for the writer with `token` (its term raised to the token, only if no
/// newer token claimed or wrote it) and reads its value; `None` when a newer token was first.
fn claim_counter(db: &Path, token: u64) -> Result<Option<i64>, BoxError> {
    let mut conn = open(db)?;
    let token = i64::try_from(token)?;
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let claimed = tx.execute(
        "UPDATE counter SET term = ?1 WHERE id = 1 AND term <= ?1",
        [token],
    )?;
    let value = if claimed == 1 {
        Some(tx.query_row("SELECT value FROM counter WHERE id = 1", [], |r| r.get(0))?)
    } else {
        None
    };
    tx.commit()?;
    Ok(value)
}

/// Writes `value` to the counter; fenced, only with a token at least the last writer's.
fn write_counter(db: &Path, token: u64, value: i64, fenced: bool) -> Result<bool, BoxError> {
    let mut conn = open(db)?;
    let token = i64::try_from(token)?;
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let fence = if fenced { "AND term <= ?1" } else { "" };
    let changed = tx.execute(
        &format!(
            "UPDATE counter SET value = ?2, term = MAX(term, ?1), writes = writes + 1 WHERE id = 1 {fence}"
        ),
        (token, value),
    )?;
    tx.commit()?;
    Ok(changed == 1)
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, BoxError> + Send + 'static,
) -> Result<T, BoxError> {
    tokio::task::spawn_blocking(work).await?
}

/// A semaphore worker process (`nemesis semaphore-worker URL DB NAME [control]`): takes a
/// permit, writes a fenced row, leaves; until killed.
///
/// # Errors
/// Bad arguments, or a failing manager, server or database.
pub fn semaphore_worker(args: &[String]) -> Result<(), BoxError> {
    run_worker(args, Family::Semaphore.subcommand(), |w| async move {
        let permits = w.locks.semaphore(KEY, PERMITS);
        let mut con = naive_connection(&w).await?;
        let opts = LockOptions::new(TTL).wait(Duration::from_secs(3_600));
        // Bounded by the coordinator, which kills this process at the end of the run.
        loop {
            let (token, hold) = if w.fenced {
                let guard = permits.acquire(&opts).await?;
                (guard.fencing_token(), Hold::Guard(guard))
            } else {
                naive_permit(&mut con).await?
            };
            let (db, name, fenced) = (w.db.clone(), w.name.clone(), w.fenced);
            let write = move |_| heartbeat_within(&db, token, &name, fenced.then_some(PERMITS));
            hold_and_write(&mut con, "permit", token, hold, || Ok(()), write).await?;
        }
    })
}

/// A read-write lock worker process (`nemesis rwlock-worker URL DB NAME [control]`): a
/// reader or (every other time, at random) a writer that increments the counter; until
/// killed.
///
/// # Errors
/// Bad arguments, or a failing manager, server or database.
pub fn rwlock_worker(args: &[String]) -> Result<(), BoxError> {
    run_worker(args, Family::RwLock.subcommand(), |w| async move {
        let lock = w.locks.rw_lock(KEY);
        let mut con = naive_connection(&w).await?;
        let opts = LockOptions::new(TTL).wait(Duration::from_secs(3_600));
        // Bounded by the coordinator, which kills this process at the end of the run.
        loop {
            let write = fastrand::bool();
            let (token, hold) = match (write, w.fenced) {
                (true, true) => {
                    let guard = lock.write(&opts).await?;
                    (guard.fencing_token(), Hold::Guard(guard))
                }
                (false, true) => {
                    let guard = lock.read(&opts).await?;
                    (guard.fencing_token(), Hold::Guard(guard))
                }
                (true, false) => naive_write(&mut con).await?,
                (false, false) => (0, Hold::Naive(None)),
            };
            let (db, fenced) = (w.db.clone(), w.fenced);
            let role = if write { "write" } else { "read" };
            // A fenced writer claims the counter (raises its term to the token) as it reads:
            // fencing only the write would let a paused holder's late write land between the
            // next writer's read and its write, and lose one of the two (as the main
            // workload's claims, `resources::claim_row`).
            let read = {
                let db = db.clone();
                move || match (write, fenced) {
                    (true, true) => claim_counter(&db, token),
                    _ => Ok(Some(counter(&db)?.0)),
                }
            };
            let write = move |value: Option<i64>| match value {
                // A reader writes nothing; it reports its read as `wrote`.
                Some(_) if !write => Ok(true),
                Some(value) => write_counter(&db, token, value + 1, fenced),
                // A newer writer claimed the counter first: refused.
                None => Ok(false),
            };
            hold_and_write(&mut con, role, token, hold, read, write).await?;
        }
    })
}

async fn naive_connection(w: &WorkerArgs) -> Result<MultiplexedConnection, BoxError> {
    let client = redis::Client::open(w.url.as_str())?;
    Ok(client.get_multiplexed_async_connection().await?)
}

/// Reports the entry; runs `read`; reports the check; waits `PREPARE` (the window the faults
/// hit); runs `write` with what `read` returned and reports it; reports the exit; leaves.
async fn hold_and_write<R: Send + 'static>(
    con: &mut MultiplexedConnection,
    role: &str,
    token: u64,
    hold: Hold,
    read: impl FnOnce() -> Result<R, BoxError> + Send + 'static,
    write: impl FnOnce(R) -> Result<bool, BoxError> + Send + 'static,
) -> Result<(), BoxError> {
    let start = now_ns();
    let deadline = match &hold {
        Hold::Guard(guard) => deadline_ns(guard),
        Hold::Naive(_) if role == "write" => start + duration_ns(TTL),
        Hold::Naive(_) => u64::MAX,
    };
    println!("enter {role} {token} {start} {deadline}");
    let read = blocking(read).await?;
    println!("checked {token}");
    tokio::time::sleep(PREPARE).await;
    let wrote = blocking(move || write(read)).await?;
    println!("{} {token}", if wrote { "wrote" } else { "refused" });
    let (end, deadline) = match &hold {
        Hold::Guard(guard) => (now_ns(), deadline_ns(guard)),
        Hold::Naive(_) => (now_ns(), deadline),
    };
    println!("exit {end} {deadline}");
    match hold {
        // A lease lost in a pause: the release reports it; nothing to undo.
        Hold::Guard(guard) => {
            let _ = guard.release().await;
        }
        Hold::Naive(Some(leave)) => {
            let _: redis::Value = query(con, &leave).await?;
        }
        Hold::Naive(None) => {}
    }
    tokio::time::sleep(Duration::from_millis(30)).await;
    Ok(())
}

/// Runs one workload for `config.seconds` under faults and checks its ledger and resources.
///
/// # Errors
/// When the run cannot be carried out (a worker or the database fails to start).
pub fn run(family: Family, config: &ProcConfig) -> Result<FamilySummary, BoxError> {
    current_thread()?.block_on(coordinate(family, config))
}

async fn coordinate(family: Family, config: &ProcConfig) -> Result<FamilySummary, BoxError> {
    let server = RedisServer::start();
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("family.db");
    create_db(&db)?;
    let ledger = drive(&Run {
        config,
        subcommand: family.subcommand(),
        url: server.url(),
        db: &db,
        ttl: TTL,
        entries: &["enter"],
    })
    .await?;
    let beliefs = beliefs(&ledger, now_ns());
    let count = |word: &str| {
        let lines = ledger.lines.iter();
        lines
            .filter(|(_, l)| l.split(' ').next() == Some(word))
            .count() as u64
    };
    let mut summary = FamilySummary {
        workload: family.name(),
        refused: count("refused"),
        faults: ledger.faults,
        max_recovery_ms: ledger.max_recovery_ms,
        ..FamilySummary::default()
    };
    match family {
        Family::Semaphore => {
            let (most, over) = crowding(&beliefs, u64::from(PERMITS));
            summary.writes = count("wrote");
            summary.most_inside = most;
            summary.overlaps = over;
            summary.stale_writes = stale_rows_within(&db, PERMITS)?;
        }
        Family::RwLock => {
            let (value, writes) = blocking({
                let db = db.clone();
                move || counter(&db)
            })
            .await?;
            summary.writes = u64::try_from(writes)?;
            summary.most_inside = crowding(&beliefs, u64::MAX).0;
            summary.overlaps = writer_overlaps(&beliefs);
            summary.lost_writes = u64::try_from(writes.saturating_sub(value))?;
        }
    }
    Ok(summary)
}
