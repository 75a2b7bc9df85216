//! The shared resources the workload increments under the lock, one of each per lock key: a
//! Redis counter (a [`FencedRedis`] hash) and a SQLite row, each with a fenced and a plain
//! (control) form.
//!
//! Each value is stored with the fencing token of the write that made it (`count:writer` in
//! Redis, a `writer` column in SQLite), so that the checker can tell which write a later read
//! saw, and so whether a write whose reply was lost happened.
//!
//! A read-modify-write is a *claim* (a fenced read: raise the resource's fence to the holder's
//! token, then read the value, atomically), then a fenced write of value + 1. Fencing only the
//! write is not enough for a read-modify-write: a paused holder whose late write lands after
//! the next holder *read* but before it *wrote* would be accepted (its token is still the
//! newest the resource has seen) and the next write would overwrite it, a lost update. Once the
//! next holder has claimed, every write with an older token is rejected, so the value it read
//! stays the latest until it writes.

use std::path::Path;
use std::sync::LazyLock;
use std::time::Duration;

use lockcore::{FenceError, FencedRedis};
use redis::aio::ConnectionManager;
use rusqlite::{Connection, OptionalExtension as _, params};

use super::BoxError;

/// The Redis key of the counter that the lock on `key` protects (outside the lock prefix).
pub fn counter_key(key: &str) -> String {
    format!("nemesis-res:counter:{key}")
}

/// The fenced read, on the hash layout of [`FencedRedis`] (fields `value` and `fence`; tokens
/// compared as decimal strings, as its write script does). Returns `{1, value}` after raising
/// the fence, `{0, fence}` when the stored fence is newer.
static CLAIM: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(crate::lua::FENCED_CLAIM));

/// A value as read: the count and the fencing token of the write that made it (0: never
/// written).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// The count.
    pub count: i64,
    /// The token of the write that stored it.
    pub writer: u64,
}

impl Seen {
    /// Parses `count:writer` (a missing value is `0:0`).
    pub fn parse(text: Option<&str>) -> Result<Seen, String> {
        let Some(text) = text else {
            return Ok(Seen {
                count: 0,
                writer: 0,
            });
        };
        let (count, writer) = text
            .split_once(':')
            .ok_or_else(|| format!("counter value {text:?}: expected `count:writer`"))?;
        Ok(Seen {
            count: count.parse().map_err(|e| format!("count {count:?}: {e}"))?,
            writer: writer
                .parse()
                .map_err(|e| format!("writer {writer:?}: {e}"))?,
        })
    }

    /// `count:writer`.
    pub fn encode(&self) -> String {
        format!("{}:{}", self.count, self.writer)
    }
}

/// The outcome of one claim or write.
#[derive(Debug)]
pub enum Outcome<T> {
    /// It happened, with this result.
    Ok(T),
    /// It did not happen (a newer token holds the resource, or the statement failed).
    Fail(String),
    /// It may have happened (no reply).
    Unknown(String),
}

impl<T> Outcome<T> {
    /// The same outcome with the `Ok` value mapped.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Outcome<U> {
        match self {
            Outcome::Ok(v) => Outcome::Ok(f(v)),
            Outcome::Fail(e) => Outcome::Fail(e),
            Outcome::Unknown(e) => Outcome::Unknown(e),
        }
    }
}

/// Claims the counter of `key` with `token` and reads it.
pub async fn claim_counter(con: &mut ConnectionManager, key: &str, token: u64) -> Outcome<Seen> {
    let reply: Result<(i64, String), redis::RedisError> = CLAIM
        .key(counter_key(key))
        .arg(token)
        .invoke_async(con)
        .await;
    match reply {
        Ok((1, value)) => match Seen::parse(Some(&value)) {
            Ok(seen) => Outcome::Ok(seen),
            Err(e) => Outcome::Fail(e),
        },
        Ok((_, fence)) => Outcome::Fail(format!("stale: fence {fence}")),
        Err(e) => Outcome::Unknown(e.to_string()),
    }
}

/// Writes `count` (as `count:token`) to the counter of `key` with `token` through
/// [`FencedRedis::set`]; a lost reply is retried (bounded: 3 more tries) with the same token
/// and value, which is safe.
pub async fn write_counter(
    con: &mut ConnectionManager,
    key: &str,
    token: u64,
    count: i64,
) -> Outcome<()> {
    let value = Seen {
        count,
        writer: token,
    }
    .encode();
    let counter = FencedRedis::new(counter_key(key));
    let mut last = String::new();
    for attempt in 0..4 {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        match counter.set(con, token, &value).await {
            Ok(()) => return Outcome::Ok(()),
            // A stale reply to a retry says nothing about the first try: it may have landed.
            Err(FenceError::Stale(stale)) if attempt == 0 => {
                return Outcome::Fail(stale.to_string());
            }
            Err(e) => last = e.to_string(),
        }
    }
    Outcome::Unknown(last)
}

/// The control's plain read of the counter (no claim).
pub async fn read_counter_plain(con: &mut ConnectionManager, key: &str) -> Outcome<Seen> {
    let reply: Result<Option<String>, redis::RedisError> = redis::cmd("HGET")
        .arg(counter_key(key))
        .arg("value")
        .query_async(con)
        .await;
    match reply {
        Ok(value) => match Seen::parse(value.as_deref()) {
            Ok(seen) => Outcome::Ok(seen),
            Err(e) => Outcome::Fail(e),
        },
        Err(e) => Outcome::Fail(e.to_string()),
    }
}

/// The control's plain write of the counter (no fence).
pub async fn write_counter_plain(
    con: &mut ConnectionManager,
    key: &str,
    seq: u64,
    count: i64,
) -> Outcome<()> {
    let value = Seen { count, writer: seq }.encode();
    let reply: Result<i64, redis::RedisError> = redis::cmd("HSET")
        .arg(counter_key(key))
        .arg("value")
        .arg(value)
        .query_async(con)
        .await;
    match reply {
        Ok(_) => Outcome::Ok(()),
        Err(e) => Outcome::Unknown(e.to_string()),
    }
}

/// Opens the SQLite database shared by all workers (WAL, 3 s busy timeout).
///
/// # Errors
/// When the file cannot be opened or set up.
pub fn open_db(path: &Path) -> Result<Connection, BoxError> {
    let db = Connection::open(path)?;
    db.busy_timeout(Duration::from_secs(3))?;
    db.pragma_update(None, "journal_mode", "WAL")?;
    db.pragma_update(None, "synchronous", "FULL")?;
    Ok(db)
}

/// Creates the table with one row per key, value 0, fence 0.
///
/// # Errors
/// An SQLite error.
pub fn init_db(path: &Path, keys: &[&str]) -> Result<(), BoxError> {
    let db = open_db(path)?;
    db.execute_batch(
        "CREATE TABLE IF NOT EXISTS rows (
             key TEXT PRIMARY KEY,
             value INTEGER NOT NULL DEFAULT 0,
             writer INTEGER NOT NULL DEFAULT 0,
             fence INTEGER NOT NULL DEFAULT 0
         );",
    )?;
    for key in keys {
        db.execute(
            "INSERT OR REPLACE INTO rows (key, value, writer, fence) VALUES (?1, 0, 0, 0)",
            params![key],
        )?;
    }
    Ok(())
}

/// Claims the row of `key` with `token` (`UPDATE .. SET fence = ?token WHERE fence <= ?token`)
/// and reads its value.
pub fn claim_row(db: &Connection, key: &str, token: u64) -> Outcome<Seen> {
    let Ok(token) = i64::try_from(token) else {
        return Outcome::Fail(format!("token {token} does not fit SQLite's INTEGER"));
    };
    let claimed = db.execute(
        "UPDATE rows SET fence = ?1 WHERE key = ?2 AND fence <= ?1",
        params![token, key],
    );
    match claimed {
        Ok(1) => read_row(db, key),
        Ok(_) => Outcome::Fail("stale: the row holds a newer fence".to_owned()),
        Err(e) => Outcome::Fail(e.to_string()),
    }
}

/// The row's value (the control's plain read, and the read after a claim).
pub fn read_row(db: &Connection, key: &str) -> Outcome<Seen> {
    let value = db
        .query_row(
            "SELECT value, writer FROM rows WHERE key = ?1",
            params![key],
            |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)),
        )
        .optional();
    match value {
        Ok(Some((count, writer))) => Outcome::Ok(Seen {
            count,
            writer: u64::try_from(writer).unwrap_or(0),
        }),
        Ok(None) => Outcome::Fail(format!("no row for {key:?}")),
        Err(e) => Outcome::Fail(e.to_string()),
    }
}

/// The fenced write: `UPDATE .. SET value = ?, writer = ?token, fence = ?token WHERE fence <=
/// ?token`.
pub fn write_row(db: &Connection, key: &str, token: u64, value: i64) -> Outcome<()> {
    let Ok(token) = i64::try_from(token) else {
        return Outcome::Fail(format!("token {token} does not fit SQLite's INTEGER"));
    };
    match db.execute(
        "UPDATE rows SET value = ?1, writer = ?2, fence = ?2 WHERE key = ?3 AND fence <= ?2",
        params![value, token, key],
    ) {
        Ok(1) => Outcome::Ok(()),
        Ok(_) => Outcome::Fail("stale: the row holds a newer fence".to_owned()),
        Err(e) => Outcome::Fail(e.to_string()),
    }
}

/// The control's plain write (no fence).
pub fn write_row_plain(db: &Connection, key: &str, seq: u64, value: i64) -> Outcome<()> {
    let seq = i64::try_from(seq).unwrap_or(i64::MAX);
    match db.execute(
        "UPDATE rows SET value = ?1, writer = ?2 WHERE key = ?3",
        params![value, seq, key],
    ) {
        Ok(1) => Outcome::Ok(()),
        Ok(_) => Outcome::Fail(format!("no row for {key:?}")),
        Err(e) => Outcome::Fail(e.to_string()),
    }
}

/// The final value of every row.
///
/// # Errors
/// An SQLite error.
pub fn row_values(path: &Path) -> Result<Vec<(String, Seen)>, BoxError> {
    let db = open_db(path)?;
    let mut statement = db.prepare("SELECT key, value, writer FROM rows ORDER BY key")?;
    let rows = statement.query_map([], |r| {
        let writer: i64 = r.get(2)?;
        Ok((
            r.get(0)?,
            Seen {
                count: r.get(1)?,
                writer: u64::try_from(writer).unwrap_or(0),
            },
        ))
    })?;
    Ok(rows.collect::<Result<Vec<_>, _>>()?)
}
