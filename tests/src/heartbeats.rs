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

/// One heartbeat by `writer` with `term`, in one transaction. Fenced, it first runs
/// `UPDATE fence SET term = ?1 WHERE id = 1 AND term <= ?1` and, when that changed no row (a
/// larger term was written before), writes nothing and returns `false`.
///
/// # Errors
/// When SQLite fails.
pub fn heartbeat(db: &Path, term: u64, writer: &str, fenced: bool) -> Result<bool, BoxError> {
    let mut conn = Connection::open(db)?;
    conn.busy_timeout(Duration::from_secs(2))?;
    let term = i64::try_from(term)?;
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    if fenced
        && tx.execute(
            "UPDATE fence SET term = ?1 WHERE id = 1 AND term <= ?1",
            [term],
        )? == 0
    {
        return Ok(false); // dropping `tx` rolls it back
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
    let conn = Connection::open(db)?;
    let mut rows = conn.prepare("SELECT term FROM heartbeat ORDER BY seq")?;
    let terms = rows.query_map([], |row| row.get::<_, i64>(0))?;
    let (mut highest, mut stale) = (0, 0);
    for term in terms {
        let term = term?;
        if term < highest {
            stale += 1;
        }
        highest = highest.max(term);
    }
    Ok(stale)
}
