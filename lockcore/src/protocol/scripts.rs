//! lockcore's scripts, one file each under `lua/` (its header says its `KEYS`, `ARGV` and
//! reply), kept in process-wide statics and called through [`Call`](crate::protocol::call::Call).
//! Scripts read user data only from `KEYS` and `ARGV`, and touch only the keys in `KEYS`; only
//! lockcore's own constants are written into their source.

use once_cell::sync::Lazy;

use crate::options::LockOptions;
use crate::protocol::keyspace;
use crate::protocol::lua::Lua;
use crate::util::time::duration_ms;

/// The most queue entries one script call passes over (dead waiters it drops) before it gives
/// up for this call; the next call goes on.
const HAND_OVER_STEPS: usize = 64;

/// The least TTL of the waiter queue and its entries after a change: they expire on their own
/// once no waiter refreshes them.
const QUEUE_TTL_FLOOR_MS: u64 = 10_000;

/// The constants the queue scripts are written with.
fn queue_constants() -> [(&'static str, String); 5] {
    [
        ("HAND_OVER_STEPS", HAND_OVER_STEPS.to_string()),
        ("MAX_TTL_MS", duration_ms(LockOptions::MAX_TTL).to_string()),
        ("QUEUE_TTL_FLOOR_MS", QUEUE_TTL_FLOOR_MS.to_string()),
        (
            "SHARES_MARKER_LEN",
            keyspace::SHARES_MARKER.len().to_string(),
        ),
        ("SHARES_MARKER", keyspace::SHARES_MARKER.to_owned()),
    ]
}

/// Every script file, by name, for the tests.
#[cfg(test)]
pub(crate) const FILES: [(&str, &str); 16] = [
    ("acquire", include_str!("lua/acquire.lua")),
    ("acquire_queued", include_str!("lua/acquire_queued.lua")),
    ("acquire_all", include_str!("lua/acquire_all.lua")),
    ("release_handoff", include_str!("lua/release_handoff.lua")),
    ("release", include_str!("lua/release.lua")),
    ("renew", include_str!("lua/renew.lua")),
    ("raise_counter", include_str!("lua/raise_counter.lua")),
    ("write_if_held", include_str!("lua/write_if_held.lua")),
    ("fenced_set", include_str!("lua/fenced_set.lua")),
    ("hand_over", include_str!("lua/hand_over.lua")),
    ("hold", include_str!("lua/hold.lua")),
    ("read_key", READ_KEY),
    ("acquire_share", include_str!("lua/acquire_share.lua")),
    ("release_share", include_str!("lua/release_share.lua")),
    ("renew_share", include_str!("lua/renew_share.lua")),
    ("shares_count", include_str!("lua/shares_count.lua")),
];

/// An operator's read of one key (`lua/read_key.lua`): sent as `EVAL` text, so that a
/// pipeline of many reads needs no script cache.
pub(crate) const READ_KEY: &str = include_str!("lua/read_key.lua");

/// The read of one key (`lua/read_key.lua`) as a cached script, for `LockManager::holder`.
pub(crate) static READ: Lazy<Lua> = Lazy::new(|| Lua::new(READ_KEY, &[], "TYPE, GET, PTTL, TIME"));

/// Acquire on one Redlock node (`lua/acquire.lua`).
pub(crate) static ACQUIRE: Lazy<Lua> = Lazy::new(|| {
    Lua::new(
        include_str!("lua/acquire.lua"),
        &[],
        "SET, GET, INCR, PTTL, TYPE, TIME",
    )
});

/// Acquire on one node, fair and with hand-off (`lua/acquire_queued.lua`).
pub(crate) static ACQUIRE_QUEUED: Lazy<Lua> = Lazy::new(|| {
    Lua::new(
        include_str!("lua/acquire_queued.lua"),
        &queue_constants(),
        "SET, GET, INCR, EXISTS, PEXPIRE, PTTL, TYPE, TIME, DEL, LINDEX, LPOP, LREM, RPUSH, HGET, HSET, HDEL, PUBLISH, ZADD, ZCARD, ZRANGE, ZREMRANGEBYSCORE",
    )
});

/// Acquire a share (a semaphore's permit, a reader's share) on one node, fair and with hand-off
/// (`lua/acquire_share.lua`).
pub(crate) static ACQUIRE_SHARE: Lazy<Lua> = Lazy::new(|| {
    Lua::new(
        include_str!("lua/acquire_share.lua"),
        &queue_constants(),
        "SET, GET, INCR, EXISTS, PEXPIRE, PTTL, TYPE, TIME, DEL, LINDEX, LPOP, LREM, RPUSH, HGET, HSET, HDEL, PUBLISH, ZADD, ZREM, ZSCORE, ZCARD, ZRANGE, ZREMRANGEBYSCORE",
    )
});

/// Release of a share on one node, with direct grant (`lua/release_share.lua`).
pub(crate) static RELEASE_SHARE: Lazy<Lua> = Lazy::new(|| {
    Lua::new(
        include_str!("lua/release_share.lua"),
        &queue_constants(),
        "GET, SET, DEL, TIME, PTTL, PEXPIRE, LINDEX, LPOP, LREM, HGET, HDEL, INCR, PUBLISH, ZADD, ZREM, ZSCORE, ZCARD, ZRANGE, ZREMRANGEBYSCORE",
    )
});

/// Extend and watchdog renewal of shares (`lua/renew_share.lua`).
pub(crate) static RENEW_SHARE: Lazy<Lua> = Lazy::new(|| {
    Lua::new(
        include_str!("lua/renew_share.lua"),
        &queue_constants(),
        "GET, TIME, DEL, PEXPIRE, ZADD, ZREM, ZSCORE, ZRANGE",
    )
});

/// The live shares of a lock key, for `Semaphore::available` (`lua/shares_count.lua`).
pub(crate) static SHARES_COUNT: Lazy<Lua> = Lazy::new(|| {
    Lua::new(
        include_str!("lua/shares_count.lua"),
        &queue_constants(),
        "GET, TYPE, TIME, ZCOUNT",
    )
});

/// Acquire of several keys on one node, all or none (`lua/acquire_all.lua`).
pub(crate) static ACQUIRE_ALL: Lazy<Lua> = Lazy::new(|| {
    Lua::new(
        include_str!("lua/acquire_all.lua"),
        &[],
        "EXISTS, SET, INCR, GET",
    )
});

/// Release on one node, with direct grant (`lua/release_handoff.lua`).
pub(crate) static RELEASE_HANDOFF: Lazy<Lua> = Lazy::new(|| {
    Lua::new(
        include_str!("lua/release_handoff.lua"),
        &queue_constants(),
        "GET, DEL, TIME, LINDEX, LPOP, LREM, HGET, HDEL, SET, INCR, PUBLISH, PTTL, PEXPIRE, ZADD, ZCARD, ZRANGE, ZREMRANGEBYSCORE",
    )
});

/// Compare-and-delete on one Redlock node (`lua/release.lua`).
pub(crate) static RELEASE: Lazy<Lua> = Lazy::new(|| {
    Lua::new(
        include_str!("lua/release.lua"),
        &[],
        "GET, DEL, TIME, PTTL, PEXPIRE",
    )
});

/// Extend and watchdog renewal (`lua/renew.lua`).
pub(crate) static RENEW: Lazy<Lua> =
    Lazy::new(|| Lua::new(include_str!("lua/renew.lua"), &[], "GET, PEXPIRE"));

/// Redlock's raise of a fencing counter (`lua/raise_counter.lua`).
pub(crate) static RAISE_COUNTER: Lazy<Lua> =
    Lazy::new(|| Lua::new(include_str!("lua/raise_counter.lua"), &[], "GET, SET"));

/// An idempotency record written only while its lock is held (`lua/write_if_held.lua`).
#[cfg_attr(not(feature = "idempotency"), allow(dead_code))]
pub(crate) static WRITE_IF_HELD: Lazy<Lua> =
    Lazy::new(|| Lua::new(include_str!("lua/write_if_held.lua"), &[], "GET, SET"));

/// The fenced write of `FencedRedis` (`lua/fenced_set.lua`).
pub(crate) static FENCED_SET: Lazy<Lua> =
    Lazy::new(|| Lua::new(include_str!("lua/fenced_set.lua"), &[], "HGET, HSET"));

/// The scripts a lock node runs, preloaded when a manager is built.
pub(crate) fn lock_scripts() -> [&'static Lua; 4] {
    [&ACQUIRE_QUEUED, &ACQUIRE_ALL, &RELEASE_HANDOFF, &RENEW]
}

#[cfg(test)]
mod contract_tests;
#[cfg(test)]
mod share_contract_tests;
#[cfg(test)]
mod share_kind_contract_tests;

#[cfg(test)]
mod contract_hold;
