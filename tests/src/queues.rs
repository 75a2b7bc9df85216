//! Probes of the hand-off machinery's server-side state: waiter queues (`__waitq__` lists and
//! `__waiters__` waiter keys, see `lockcore::holder::waiter_queue_keys`), wake-up channels and
//! pub/sub clients. Queue keys are found with `KEYS`.
//!
//! The planting helpers ([`plant_queued`], [`plant_typed`], [`plant_dead_queue`],
//! [`waiter_entry`]) write well-formed, malformed and wrong-typed queue state by hand, for
//! fuzzing. Everything this harness knows about the queue layout (beyond the names
//! `lockcore::holder` gives) is in this file.

use std::time::Duration;

use lockcore::LockManager;
use redis::aio::MultiplexedConnection;
use tokio::time::{Instant, sleep};

use crate::{RedisServer, cmd, manager, query};

/// `KEYS` pattern of the waiter queue lists.
pub const QUEUE_PATTERN: &str = "*__waitq__*";
/// `KEYS` pattern of the waiter keys.
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

/// Both kinds of queue keys (lists and waiter keys) on the server.
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

/// Whether the waiter that queued `value` is live: its waiter key (under `waiter_prefix`, as
/// returned by [`wait_queue_len`]) exists.
pub async fn waiter_live(
    con: &mut MultiplexedConnection,
    waiter_prefix: &str,
    value: &str,
) -> bool {
    let key = lockcore::holder::waiter_key(waiter_prefix, value);
    let n: i64 = query(con, &cmd(&["EXISTS", &key])).await;
    n == 1
}

/// Writes a live-looking waiter key for `value` by hand, in the format the acquire script
/// writes (`ttl_ms|seq|channel length|channel` + fencing counter key), living `lease_ms`. The
/// caller puts `value` in the queue list.
pub async fn plant_waiter(
    con: &mut MultiplexedConnection,
    waiter_prefix: &str,
    value: &str,
    ttl_ms: u64,
    channel: &str,
    counter_key: &str,
    lease_ms: u64,
) {
    let key = lockcore::holder::waiter_key(waiter_prefix, value);
    let entry = waiter_entry(ttl_ms, 1, channel, counter_key);
    let _: String = query(
        con,
        &cmd(&["SET", &key, &entry, "PX", &lease_ms.to_string()]),
    )
    .await;
}

/// Polls until the (single) waiter queue holds `n` values; returns the queue list's key and
/// the prefix of its waiter keys. Panics after [`SHOW_UP`].
pub async fn wait_queue_len(con: &mut MultiplexedConnection, n: usize) -> (String, String) {
    let started = Instant::now();
    while started.elapsed() < SHOW_UP {
        if let Some(queue) = single_key(con, QUEUE_PATTERN).await
            && llen(con, &queue).await == n
        {
            let waiter_prefix = format!("{}:", queue.replacen("__waitq__", "__waiters__", 1));
            return (queue, waiter_prefix);
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

/// A waiter key's value in the format the acquire script writes:
/// `ttl_ms|seq|channel length|channel` followed by the fencing counter key.
pub fn waiter_entry(ttl_ms: u64, seq: u64, channel: &str, counter_key: &str) -> String {
    format!("{ttl_ms}|{seq}|{}|{channel}{counter_key}", channel.len())
}

/// The waiter queue list and the waiter key prefix of `lock_key` (full key) under the default
/// prefix.
pub fn queue_of(lock_key: &str) -> (String, String) {
    lockcore::holder::waiter_queue_keys(lockcore::DEFAULT_KEY_PREFIX, lock_key)
}

/// Queues `value` for `lock_key` (at the back), with `entry` (any text, well-formed or not)
/// as its waiter key's value, living `lease_ms`; no waiter key with `entry` `None` (a waiter
/// that died). The queue list keeps no expiry.
pub async fn plant_queued(
    con: &mut MultiplexedConnection,
    lock_key: &str,
    value: &str,
    entry: Option<&str>,
    lease_ms: u64,
) {
    let (queue, waiter_prefix) = queue_of(lock_key);
    let _: i64 = query(con, &cmd(&["RPUSH", &queue, value])).await;
    if let Some(entry) = entry {
        let key = lockcore::holder::waiter_key(&waiter_prefix, value);
        let _: () = query(
            con,
            &cmd(&["SET", &key, entry, "PX", &lease_ms.to_string()]),
        )
        .await;
    }
}

/// `n` queued values for `lock_key` none of which has a waiter key (all dead), each `len`
/// bytes long.
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

/// The waiter key that the queued `value` of `lock_key` would have.
pub fn waiter_key_of(lock_key: &str, value: &str) -> String {
    lockcore::holder::waiter_key(&queue_of(lock_key).1, value)
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
