//! Probes of the hand-off machinery's server-side state: waiter queues (`__waitq__` lists and
//! `__waiters__` entry hashes, see `lockcore::keyspace::waiter_queue_keys`), wake-up channels and
//! pub/sub clients. Queue keys are found with `KEYS`.
//!
//! The planting helpers ([`plant_waiter`], [`plant_queued`], [`plant_typed`],
//! [`plant_dead_queue`], [`waiter_entry`]) write well-formed, malformed and wrong-typed queue
//! state by hand, for fuzzing. Everything this harness knows about the queue layout (beyond the
//! names `lockcore::keyspace` gives) is in this file.

use std::time::Duration;

use lockcore::LockManager;
use redis::aio::MultiplexedConnection;
use tokio::time::{Instant, sleep};

use crate::{RedisServer, cmd, manager, query};

/// `KEYS` pattern of the waiter queue lists.
pub const QUEUE_PATTERN: &str = "*__waitq__*";
/// `KEYS` pattern of the waiter entry hashes.
pub const ENTRIES_PATTERN: &str = "*__waiters__*";
/// `PUBSUB CHANNELS` pattern of the wake-up channels.
pub const CHANNEL_PATTERN: &str = "lock:__wake__:*";
/// Step of every bounded poll of Redis state.
pub const POLL: Duration = Duration::from_millis(1);
/// Bound of every poll that waits for a waiter to show up in Redis.
pub const SHOW_UP: Duration = Duration::from_secs(2);

/// `KEYS pattern`.
pub async fn keys(con: &mut MultiplexedConnection, pattern: &str) -> Vec<String> {
    query(con, &cmd(&["KEYS", pattern])).await
}

/// Both kinds of queue keys (lists and entry hashes) on the server.
pub async fn queue_leftovers(con: &mut MultiplexedConnection) -> Vec<String> {
    let mut found = keys(con, QUEUE_PATTERN).await;
    found.extend(keys(con, ENTRIES_PATTERN).await);
    found
}

/// The single key matching `pattern`, if exactly one exists.
pub async fn single_key(con: &mut MultiplexedConnection, pattern: &str) -> Option<String> {
    let mut found = keys(con, pattern).await;
    (found.len() == 1).then(|| found.remove(0))
}

/// `LLEN key`.
pub async fn llen(con: &mut MultiplexedConnection, key: &str) -> usize {
    query(con, &cmd(&["LLEN", key])).await
}

/// `LRANGE key 0 -1`.
pub async fn lrange(con: &mut MultiplexedConnection, key: &str) -> Vec<String> {
    query(con, &cmd(&["LRANGE", key, "0", "-1"])).await
}

/// The token (first word) of a lock value: a hand-over stores a waiter's queued value with its
/// `acquired_at` stamped, so the holder is recognised by its token.
pub fn token_of(value: &str) -> &str {
    lockcore::keyspace::split_value(value).0
}

/// The token of the value at `key`, if any.
pub async fn holder_token(con: &mut MultiplexedConnection, key: &str) -> Option<String> {
    let value: Option<String> = query(con, &cmd(&["GET", key])).await;
    value.map(|value| token_of(&value).to_owned())
}

/// The Redis server's clock, in ms since the Unix epoch (`TIME`).
pub async fn server_now_ms(con: &mut MultiplexedConnection) -> u64 {
    let (secs, micros): (u64, u64) = query(con, &cmd(&["TIME"])).await;
    secs * 1000 + micros / 1000
}

/// Whether the waiter that queued `value` is live: its entry in `entries` (as returned by
/// [`wait_queue_len`]) has a deadline ahead of the server's clock.
pub async fn waiter_live(con: &mut MultiplexedConnection, entries: &str, value: &str) -> bool {
    let token = lockcore::keyspace::split_value(value).0;
    let entry: Option<String> = query(con, &cmd(&["HGET", entries, token])).await;
    let now = server_now_ms(con).await;
    entry
        .as_deref()
        .and_then(lockcore::keyspace::entry_deadline_ms)
        .is_some_and(|deadline| deadline > now)
}

/// Writes a live-looking entry for `value` by hand, in the format the acquire script writes
/// (`deadline|ttl_ms|seq|claim_ms|counter length|` + fencing counter key + channel), live for
/// `lease_ms` by the server's clock, with a 500 ms claim window. The caller puts `value` in the
/// queue list.
pub async fn plant_waiter(
    con: &mut MultiplexedConnection,
    entries: &str,
    value: &str,
    ttl_ms: u64,
    channel: &str,
    counter_key: &str,
    lease_ms: u64,
) {
    let token = lockcore::keyspace::split_value(value).0;
    let deadline = server_now_ms(con).await + lease_ms;
    let entry = format!(
        "{deadline}|{ttl_ms}|1|500|{}|{counter_key}{channel}",
        counter_key.len()
    );
    let _: i64 = query(con, &cmd(&["HSET", entries, token, &entry])).await;
    let keep = (lease_ms * 4).max(10_000).to_string();
    let _: i64 = query(con, &cmd(&["PEXPIRE", entries, &keep])).await;
}

/// Polls until the (single) waiter queue holds `n` values; returns the queue list's key and
/// its entries hash's key. Panics after [`SHOW_UP`].
pub async fn wait_queue_len(con: &mut MultiplexedConnection, n: usize) -> (String, String) {
    let started = Instant::now();
    while started.elapsed() < SHOW_UP {
        if let Some(queue) = single_key(con, QUEUE_PATTERN).await
            && llen(con, &queue).await == n
        {
            let entries = queue.replacen("__waitq__", "__waiters__", 1);
            return (queue, entries);
        }
        sleep(POLL).await;
    }
    panic!(
        "the waiter queue did not reach {n} tokens within {SHOW_UP:?}: queue keys {:?}",
        queue_leftovers(con).await
    );
}

/// Polls until no queue key is left; returns how long that took, `None` if still there after
/// `within`.
pub async fn queue_gone_within(
    con: &mut MultiplexedConnection,
    within: Duration,
) -> Option<Duration> {
    let started = Instant::now();
    loop {
        if queue_leftovers(con).await.is_empty() {
            return Some(started.elapsed());
        }
        if started.elapsed() >= within {
            return None;
        }
        sleep(POLL).await;
    }
}

/// Polls until Redis has run more than `before` script calls (the signal that a waiter's
/// attempt has run). Panics after [`SHOW_UP`].
pub async fn wait_script_calls_above(con: &mut MultiplexedConnection, before: u64) -> Duration {
    let started = Instant::now();
    while started.elapsed() < SHOW_UP {
        if crate::script_calls(con).await > before {
            return started.elapsed();
        }
        sleep(POLL).await;
    }
    panic!("no script call reached Redis within {SHOW_UP:?}");
}

/// The wake-up channels subscribed now.
pub async fn wake_channels(con: &mut MultiplexedConnection) -> Vec<String> {
    query(con, &cmd(&["PUBSUB", "CHANNELS", CHANNEL_PATTERN])).await
}

/// `PUBSUB NUMSUB channel`: how many clients subscribe to it.
pub async fn numsub(con: &mut MultiplexedConnection, channel: &str) -> i64 {
    let (_, n): (String, i64) = query(con, &cmd(&["PUBSUB", "NUMSUB", channel])).await;
    n
}

/// The ids of the pub/sub clients connected now (`CLIENT LIST TYPE pubsub`).
pub async fn pubsub_client_ids(con: &mut MultiplexedConnection) -> Vec<String> {
    let list: String = query(con, &cmd(&["CLIENT", "LIST", "TYPE", "pubsub"])).await;
    list.lines()
        .filter_map(|line| line.strip_prefix("id=")?.split(' ').next())
        .map(str::to_owned)
        .collect()
}

/// A manager on `server` and the wake-up channel it subscribed to when it was built (the one
/// channel that appeared meanwhile).
pub async fn manager_with_channel(
    server: &RedisServer,
    raw: &mut MultiplexedConnection,
) -> (LockManager, String) {
    let before = wake_channels(raw).await;
    let m = manager(server).await;
    let after = wake_channels(raw).await;
    let new: Vec<String> = after.into_iter().filter(|c| !before.contains(c)).collect();
    assert_eq!(
        new.len(),
        1,
        "building a manager subscribes exactly one wake-up channel, got {new:?}"
    );
    (m, new[0].clone())
}

/// A deadline far in the future (ms since the Unix epoch, in the year 2286): an entry with it
/// stays live.
pub const FAR_FUTURE_MS: u64 = 9_999_999_999_999;

/// A waiter entry in the format the acquire script writes,
/// `deadline|ttl_ms|seq|claim_ms|counter length|` + fencing counter key + channel, live until
/// [`FAR_FUTURE_MS`], with a 500 ms claim window.
pub fn waiter_entry(ttl_ms: u64, seq: u64, channel: &str, counter_key: &str) -> String {
    format!(
        "{FAR_FUTURE_MS}|{ttl_ms}|{seq}|500|{}|{counter_key}{channel}",
        counter_key.len()
    )
}

/// The waiter queue list and the entries hash of `lock_key` (full key) under the default
/// prefix.
pub fn queue_of(lock_key: &str) -> (String, String) {
    lockcore::keyspace::waiter_queue_keys(lockcore::DEFAULT_KEY_PREFIX, lock_key)
}

/// Queues `value` for `lock_key` (at the back), with `entry` (any text, well-formed or not)
/// as its entry in the entries hash, which is kept `lease_ms` (at least 1 ms); no entry with
/// `entry` `None` (a waiter that died). The queue list keeps no expiry.
pub async fn plant_queued(
    con: &mut MultiplexedConnection,
    lock_key: &str,
    value: &str,
    entry: Option<&str>,
    lease_ms: u64,
) {
    let (queue, entries) = queue_of(lock_key);
    let _: i64 = query(con, &cmd(&["RPUSH", &queue, value])).await;
    if let Some(entry) = entry {
        let token = lockcore::keyspace::split_value(value).0;
        let _: i64 = query(con, &cmd(&["HSET", &entries, token, entry])).await;
        let keep = lease_ms.max(1).to_string();
        let _: i64 = query(con, &cmd(&["PEXPIRE", &entries, &keep])).await;
    }
}

/// `n` queued values for `lock_key` none of which has an entry (all dead), each `len` bytes
/// long.
pub async fn plant_dead_queue(
    con: &mut MultiplexedConnection,
    lock_key: &str,
    n: usize,
    len: usize,
) {
    let (queue, _) = queue_of(lock_key);
    let mut left = n;
    let mut i = 0usize;
    while left > 0 {
        let batch = left.min(1_000);
        let mut rpush = redis::cmd("RPUSH");
        rpush.arg(&queue);
        for _ in 0..batch {
            let mut value = format!("dead-{i} ");
            value.extend(std::iter::repeat_n('x', len.saturating_sub(value.len())));
            rpush.arg(value);
            i += 1;
        }
        let _: i64 = query(con, &rpush).await;
        left -= batch;
    }
}

/// A Redis type to plant where lockcore expects another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedisType {
    /// A plain string (not an integer).
    String,
    /// A string holding an integer.
    Integer(i64),
    /// A list of one element.
    List,
    /// A hash of one field.
    Hash,
    /// A set of one member.
    Set,
    /// A sorted set of one member.
    ZSet,
}

/// Replaces `key` with a value of type `kind`, without expiry.
pub async fn plant_typed(con: &mut MultiplexedConnection, key: &str, kind: RedisType) {
    let _: i64 = query(con, &cmd(&["DEL", key])).await;
    let planted = match kind {
        RedisType::String => cmd(&["SET", key, "not a lockcore value"]),
        RedisType::Integer(n) => cmd(&["SET", key, &n.to_string()]),
        RedisType::List => cmd(&["RPUSH", key, "x"]),
        RedisType::Hash => cmd(&["HSET", key, "f", "v"]),
        RedisType::Set => cmd(&["SADD", key, "m"]),
        RedisType::ZSet => cmd(&["ZADD", key, "1", "m"]),
    };
    let _: redis::Value = query(con, &planted).await;
}
