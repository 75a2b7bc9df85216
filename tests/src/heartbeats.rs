//! The fenced heartbeat table that the leader example (`examples/jobs/leader_sqlite.rs`) and the
//! nemesis' leader workload write to: SQLite, one row per heartbeat with the writer's term, and
//! the highest term written so far, raised in each write's transaction.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, TransactionBehavior};

/// The error of a database call.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Creates the tables in `db`: `fence` (the highest term written so far) and `heartbeat`
/// (the rows in commit order).
///
/// # Errors
/// When SQLite fails.
pub fn create(db: &Path) -> Result<(), BoxError> {
    Connection::open(db)?.execute_batch(
        "PRAGMA journal_mode = WAL;
         CREATE TABLE fence (id INTEGER PRIMARY KEY, term INTEGER NOT NULL);
         INSERT INTO fence VALUES (1, 0);
         CREATE TABLE heartbeat (seq INTEGER PRIMARY KEY AUTOINCREMENT, term INTEGER NOT NULL, writer TEXT NOT NULL);",
    )?;
    Ok(())
}

/// One heartbeat by `writer` with `term`, in one transaction. Fenced, it refuses (writes
/// nothing, returns `false`) a term below the fence (`fence.term`, the largest term written so
/// far), and raises the fence in the write's transaction.
///
/// # Errors
/// When SQLite fails.
pub fn heartbeat(db: &Path, term: u64, writer: &str, fenced: bool) -> Result<bool, BoxError> {
    heartbeat_within(db, term, writer, fenced.then_some(1))
}

/// [`heartbeat`] with `slots` writers accepted at once (a semaphore's permits): fenced
/// (`Some(slots)`), it refuses a term below the `slots`-th largest term written so far, i.e.
/// a writer that `slots` newer ones have overtaken. Conservative: a holder still inside its
/// lease whose write comes after `slots` newer holders' is refused too (a retry, never a
/// stale write). `Some(1)` is [`heartbeat`]'s fence.
///
/// # Errors
/// When SQLite fails.
pub fn heartbeat_within(
    db: &Path,
    term: u64,
    writer: &str,
    slots: Option<u32>,
) -> Result<bool, BoxError> {
    let mut conn = Connection::open(db)?;
    conn.busy_timeout(Duration::from_secs(2))?;
    let term = i64::try_from(term)?;
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    if let Some(slots) = slots {
        let floor: i64 = tx.query_row(
            "SELECT COALESCE((SELECT term FROM heartbeat ORDER BY term DESC LIMIT 1 OFFSET ?1), 0)",
            [slots.saturating_sub(1)],
            |row| row.get(0),
        )?;
        if term < floor {
            return Ok(false); // dropping `tx` rolls it back
        }
        tx.execute("UPDATE fence SET term = MAX(term, ?1) WHERE id = 1", [term])?;
    }
    tx.execute(
        "INSERT INTO heartbeat (term, writer) VALUES (?1, ?2)",
        (term, writer),
    )?;
    tx.commit()?;
    Ok(true)
}

/// The stale heartbeats: rows whose term is below the largest term of the rows before them (a
/// deposed leader's write that landed after a newer leader's).
///
/// # Errors
/// When SQLite fails.
pub fn stale_rows(db: &Path) -> Result<u64, BoxError> {
    stale_rows_within(db, 1)
}

/// The rows whose term is below the `slots`-th largest term of the rows before them: writes
/// that landed after `slots` newer writers' (what [`heartbeat_within`]'s fence refuses).
///
/// # Errors
/// When SQLite fails.
pub fn stale_rows_within(db: &Path, slots: u32) -> Result<u64, BoxError> {
    let conn = Connection::open(db)?;
    let mut rows = conn.prepare("SELECT term FROM heartbeat ORDER BY seq")?;
    let terms = rows.query_map([], |row| row.get::<_, i64>(0))?;
    let slots = usize::try_from(slots.max(1))?;
    // The `slots` largest terms so far, largest first.
    let (mut highest, mut stale) = (Vec::with_capacity(slots + 1), 0);
    for term in terms {
        let term = term?;
        if highest.len() == slots && highest.last().is_some_and(|&floor| term < floor) {
            stale += 1;
        }
        let at = highest.partition_point(|&t| t >= term);
        highest.insert(at, term);
        highest.truncate(slots);
    }
    Ok(stale)
}
