//! The scripts without a queue: `acquire.lua` (a Redlock node's acquire), `release.lua`
//! (compare-and-delete), `renew.lua` (compare-and-`PEXPIRE`: extend, the watchdog and the first
//! renewal of a handed-over lease), `acquire_all.lua` (bulk, all or none) and
//! `raise_counter.lua`.

use super::{Abort, Outcome, Reply, below, mint, not_a_lock, owns, token_of, value_of};
use crate::store::{Store, WrongType};

/// `acquire.lua`: `KEYS = [lock, counter]`, `ARGV = [value, ttl_ms]`.
pub fn acquire(store: &mut Store, lock: &str, counter: &str, value: &str, ttl: u64) -> Outcome {
    let reply = match store.get(lock) {
        Ok(None) => {
            store.set(lock, value, Some(ttl));
            match mint(store, lock, counter) {
                Ok(token) => Reply::Array(vec![Reply::Int(1), token]),
                Err(err) => Reply::Error(err),
            }
        }
        Ok(Some(_)) => Reply::ints(&[0, store.pttl(lock)]),
        Err(WrongType) => not_a_lock(store, lock),
    };
    (reply, Vec::new())
}

/// `release.lua`: `KEYS = [lock]`, `ARGV = [value or token]`; 1 when deleted, else 0.
pub fn release(store: &mut Store, lock: &str, value: &str) -> Outcome {
    let held = owns(value_of(store, lock).as_deref(), token_of(value));
    let reply = Reply::Int(i64::from(held && store.del(lock)));
    (reply, Vec::new())
}

/// `renew.lua`: `KEYS[i]` with `(value or token, ttl_ms)` each; one 1 or 0 per key.
pub fn renew(store: &mut Store, leases: &[(&str, &str, u64)]) -> Outcome {
    let renewed = leases
        .iter()
        .map(|&(key, value, ttl)| {
            let held = owns(value_of(store, key).as_deref(), token_of(value));
            Reply::Int(i64::from(held && store.pexpire(key, ttl)))
        })
        .collect();
    (Reply::Array(renewed), Vec::new())
}

/// One key of [`acquire_all`]: lock key, fencing counter, waiter queue and value.
#[derive(Debug, Clone, Copy)]
pub struct BulkKey<'a> {
    /// The lock key.
    pub lock: &'a str,
    /// Its fencing counter (the lock key itself: no fencing).
    pub counter: &'a str,
    /// Its waiter queue.
    pub queue: &'a str,
    /// The value to set.
    pub value: &'a str,
}

/// `acquire_all.lua`: every key when no lock key nor queue exists, else `{0}`.
pub fn acquire_all(store: &mut Store, keys: &[BulkKey<'_>], ttl: u64) -> Outcome {
    if keys
        .iter()
        .any(|k| store.exists(k.lock) || store.exists(k.queue))
    {
        return (Reply::ints(&[0]), Vec::new());
    }
    let mut reply = vec![Reply::Int(1)];
    for key in keys {
        store.set(key.lock, key.value, Some(ttl));
        match mint(store, key.lock, key.counter) {
            Ok(token) => reply.push(token),
            Err(err) => return (Reply::Error(err), Vec::new()),
        }
    }
    (Reply::Array(reply), Vec::new())
}

/// `raise_counter.lua`: `KEYS = [counter]`, `ARGV = [token]`; never lowers the counter.
pub fn raise_counter(store: &mut Store, counter: &str, token: &str) -> Outcome {
    let raised = || -> Result<(), Abort> {
        let current = store.get(counter).map_err(super::abort)?;
        if below(current.as_deref().unwrap_or("0"), token) {
            store.set(counter, token, None);
        }
        Ok(())
    }();
    match raised {
        Ok(()) => (Reply::Int(1), Vec::new()),
        Err(err) => (Reply::Error(err), Vec::new()),
    }
}
