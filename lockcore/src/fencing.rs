//! Fencing tokens: a number minted by the acquire script that grows with every acquisition.
//!
//! The lock alone cannot stop a holder that was paused past its TTL (a GC pause, `SIGSTOP`, a
//! slow network) from writing after a new holder took over (Kleppmann, "How to do distributed
//! locking", 2016). The fencing token fixes that when the *resource* checks it: it accepts a
//! write only with a token newer than any it has seen. See [`FencedRedis`](crate::FencedRedis),
//! [`FenceGate`](crate::FenceGate) and the SQL pattern in the guide (`docs/src/fencing.md`).
//!
//! # Where the counter lives
//! [`FencingCounter::PerPrefix`] (default): one counter key per key prefix,
//! `<prefix>__fencing_counter__`, so memory does not grow with the number of distinct lock
//! keys. [`FencingCounter::PerSlot`]: one counter per Redis Cluster hash slot (at most 16 384
//! keys), named so that it hashes to the lock key's slot: the acquire script may touch it on a
//! cluster without any change to the lock key.
//!
//! # When monotonicity breaks
//! The token is strictly increasing only while the counter survives. It breaks when:
//! - Redis restarts without persistence (the counter starts again from 1): use AOF with
//!   `appendfsync always` where fencing matters;
//! - a replica is promoted before it received the latest `INCR` (asynchronous replication);
//! - the counter is evicted: under an `allkeys-*` `maxmemory-policy` any key may go. The
//!   manager checks the policy once when it is built and logs a warning through `tracing`.

/// Where the fencing counter that the acquire script increments is kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum FencingCounter {
    /// One counter per key prefix, `<prefix>__fencing_counter__`. For a single Redis node and
    /// Redlock. On Redis Cluster most lock keys are in another slot than this counter, and the
    /// acquire fails with `CROSSSLOT`: use [`PerSlot`](Self::PerSlot) there.
    #[default]
    PerPrefix,
    /// One counter per Redis Cluster hash slot, `<prefix>__fencing_counter__{<tag>}`, where
    /// `<tag>` hashes to the lock key's slot. At most 16 384 counter keys.
    PerSlot,
    /// No counter: the acquire is a plain `SET NX PX` (no `INCR`), and
    /// [`LockGuard::fencing_token`](crate::LockGuard::fencing_token) is 0, which
    /// [`FencedRedis`](crate::FencedRedis) and [`FenceGate`](crate::FenceGate) always refuse
    /// (their error says that fencing is off). What it costs in safety: a holder paused past its
    /// TTL (GC, `SIGSTOP`, a slow network) can still write after the next holder took over, and
    /// nothing at the resource stops it; the lock alone is then only as good as the TTL.
    Off,
}

/// The fencing token of a guard acquired with [`FencingCounter::Off`]: never minted by a
/// counter (which starts at 1), refused by every fenced resource.
pub(crate) const NO_FENCING_TOKEN: u64 = 0;

pub(crate) const COUNTER_NAME: &str = "__fencing_counter__";

/// The counter key for `lock_key` (the full key, prefix included); `lock_key` itself when
/// fencing is off. The name is reserved: a key that starts with `__fencing_counter__` is
/// refused as [`LockError::InvalidKey`](crate::LockError).
pub(crate) fn counter_key(prefix: &str, lock_key: &str, mode: FencingCounter) -> String {
    // Joined by hand: `format!` costs several times as much (argument dispatch, padding
    // checks, a capacity guess and a re-allocation) on every attempt.
    match mode {
        FencingCounter::PerPrefix => concat(&[prefix, COUNTER_NAME]),
        FencingCounter::PerSlot => {
            let tag = crate::slot::tag_for(lock_key);
            concat(&[prefix, COUNTER_NAME, "{", tag, "}"])
        }
        // The scripts mint nothing when the counter key is the lock key itself (same slot).
        FencingCounter::Off => lock_key.to_owned(),
    }
}

/// `parts` joined, in one allocation of the exact size.
fn concat(parts: &[&str]) -> String {
    let mut joined = String::with_capacity(parts.iter().map(|part| part.len()).sum());
    for part in parts {
        joined.push_str(part);
    }
    joined
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_slot_counter_shares_the_lock_keys_slot() {
        for key in ["lock:order:1", "lock:{user:7}:cart", "lock:caf\u{e9}", "x"] {
            let counter = counter_key("lock:", key, FencingCounter::PerSlot);
            assert_eq!(
                crate::slot::key_hash_slot(counter.as_bytes()),
                crate::slot::key_hash_slot(key.as_bytes()),
                "{key}"
            );
        }
    }

    #[test]
    fn counter_names_are_unchanged() {
        assert_eq!(
            counter_key("lock:", "lock:a", FencingCounter::PerPrefix),
            "lock:__fencing_counter__"
        );
        let tag = crate::slot::tag_for("lock:a");
        assert_eq!(
            counter_key("lock:", "lock:a", FencingCounter::PerSlot),
            format!("lock:__fencing_counter__{{{tag}}}")
        );
        assert_eq!(
            counter_key("lock:", "lock:a", FencingCounter::Off),
            "lock:a"
        );
    }

    #[test]
    fn per_prefix_counter_is_one_key() {
        assert_eq!(
            counter_key("lock:", "lock:a", FencingCounter::PerPrefix),
            counter_key("lock:", "lock:b", FencingCounter::PerPrefix)
        );
    }
}
