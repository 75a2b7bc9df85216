//! The scripts of `lockcore/src/protocol/lua/`, re-stated in Rust over a [`Store`]: each function
//! is one script call, atomic (the model's server runs one at a time), with the script's keys
//! and arguments as the library sends them and its reply as Redis returns it. The differential
//! test (`tests/differential.rs`) holds each one to the real script on a real server.
//!
//! - [`queued`]: `acquire_queued.lua` (modes 0, 1, 2), `release_handoff.lua` and their helpers
//!   `hand_over.lua` (`serve`), `enqueue.lua` and `entries.lua`: the fair queue with direct
//!   grant, for plain locks (no share set, no job stamps or minimum holds);
//! - [`plain`]: `acquire.lua`, `release.lua`, `renew.lua` (extend, watchdog, promotion),
//!   `acquire_all.lua` (bulk), `raise_counter.lua`.

use crate::store::{Store, WRONGTYPE, WrongType};

pub mod plain;
pub mod queued;

/// A script's reply, as Redis converts a Lua value (a Lua `false` is a nil, a number an
/// integer).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Reply {
    /// An integer.
    Int(i64),
    /// A bulk string.
    Bulk(String),
    /// A nil.
    Nil,
    /// An array.
    Array(Vec<Reply>),
    /// An error reply (a script error or `redis.error_reply`): its text.
    Error(String),
}

impl Reply {
    /// `{a, b, ..}` of integers.
    pub fn ints(values: &[i64]) -> Reply {
        Reply::Array(values.iter().map(|&v| Reply::Int(v)).collect())
    }
}

/// The constants lockcore writes into the queue scripts (`@NAME@`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Constants {
    /// `@HAND_OVER_STEPS@`: the most queue entries one call passes.
    pub hand_over_steps: usize,
    /// `@MAX_TTL_MS@`: the longest claim a grant sets.
    pub max_ttl_ms: u64,
    /// `@QUEUE_TTL_FLOOR_MS@`: the least TTL of the queue keys after a change.
    pub queue_ttl_floor_ms: u64,
}

impl Constants {
    /// lockcore's own values (`protocol/scripts.rs`; `LockOptions::MAX_TTL` is one day).
    pub const LOCKCORE: Constants = Constants {
        hand_over_steps: 64,
        max_ttl_ms: 86_400_000,
        queue_ttl_floor_ms: 10_000,
    };
}

/// A deliberately wrong script, for the negative controls: the checker must find the bug it
/// brings (see `tests/controls.rs`), and the differential test must see it differ from Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ScriptBug {
    /// The scripts as lockcore ships them.
    #[default]
    None,
    /// `release_handoff.lua` without its owner check: any value releases (deletes or hands
    /// over) the key.
    ReleaseWithoutOwnerCheck,
    /// `release_handoff.lua` that deletes the key even when a live waiter is queued: the
    /// queue invariant that the free-key fast path relies on is gone.
    ReleaseDeletes,
}

/// A script call's result: its reply and the messages it published (channel, payload).
pub type Outcome = (Reply, Vec<(String, String)>);

/// A failed `redis.call` aborts the script with an error reply (its writes so far stay).
type Abort = String;

/// `WRONGTYPE` as a script abort.
fn abort(_: WrongType) -> Abort {
    WRONGTYPE.to_owned()
}

/// `token_of(value)`: the value's first word.
pub fn token_of(value: &str) -> &str {
    value.split(' ').next().unwrap_or("")
}

/// `owns(value, token)`: whether `value` is the value of the holder whose token is `token`.
pub fn owns(value: Option<&str>, token: &str) -> bool {
    value.is_some_and(|value| {
        value.starts_with(token)
            && (value.len() == token.len() || value.as_bytes()[token.len()] == b' ')
    })
}

/// `value_of(key)`: the key's string, `None` when missing, `""` when of another type.
fn value_of(store: &Store, key: &str) -> Option<String> {
    match store.get(key) {
        Ok(value) => value,
        Err(WrongType) => Some(String::new()),
    }
}

/// `mint(counter)`: `INCR` of the counter, 0 when the counter is the lock key (fencing off);
/// above 2^53 the counter's decimal string (a Lua double would round it).
fn mint(store: &mut Store, lock_key: &str, counter: &str) -> Result<Reply, Abort> {
    if counter == lock_key {
        return Ok(Reply::Int(0));
    }
    let n = store.incr(counter)?;
    if n >= 9_007_199_254_740_992 {
        return Ok(Reply::Bulk(n.to_string()));
    }
    Ok(Reply::Int(n))
}

/// `decimal(mint(..))`: a minted token as its decimal text.
fn decimal(token: &Reply) -> String {
    match token {
        Reply::Int(n) => n.to_string(),
        Reply::Bulk(s) => s.clone(),
        _ => String::new(),
    }
}

/// `not_a_lock`: `{-1, <type>}` for a lock key of another type.
fn not_a_lock(store: &Store, key: &str) -> Reply {
    Reply::Array(vec![
        Reply::Int(-1),
        Reply::Bulk(store.type_of(key).to_owned()),
    ])
}

/// `below(a, b)` of `decimal.lua`: a < b for canonical decimals (the longer is larger).
fn below(a: &str, b: &str) -> bool {
    if a.len() != b.len() {
        return a.len() < b.len();
    }
    a < b
}

/// Lua's `tonumber` of a decimal the scripts matched with `%d+`.
fn number(digits: &str) -> u64 {
    digits.parse().unwrap_or(u64::MAX)
}
