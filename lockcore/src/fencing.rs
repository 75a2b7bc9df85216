//! Fencing tokens: a number minted by the acquire script that grows with every acquisition.
//!
//! The lock alone cannot stop a holder that was paused past its TTL (a GC pause, `SIGSTOP`, a
//! slow network) from writing after a new holder took over (Kleppmann, "How to do distributed
//! locking", 2016). The fencing token fixes that when the *resource* checks it: it accepts a
//! write only with a token newer than any it has seen. See [`FencedRedis`](crate::FencedRedis),
//! [`FenceGate`](crate::FenceGate) and the SQL pattern in the crate docs.
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

use once_cell::sync::Lazy;

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
}

pub(crate) const COUNTER_NAME: &str = "__fencing_counter__";

/// The counter key for `lock_key` (the full key, prefix included). The name is reserved: a key
/// that starts with `__fencing_counter__` is refused as [`LockError::InvalidKey`](crate::LockError).
pub(crate) fn counter_key(prefix: &str, lock_key: &str, mode: FencingCounter) -> String {
    match mode {
        FencingCounter::PerPrefix => format!("{prefix}{COUNTER_NAME}"),
        FencingCounter::PerSlot => {
            let tag = &SLOT_TAGS[usize::from(key_hash_slot(lock_key.as_bytes()))];
            format!("{prefix}{COUNTER_NAME}{{{tag}}}")
        }
    }
}

const SLOTS: usize = 16_384;

/// The Redis Cluster hash slot of `key`: CRC16-XMODEM of the hash tag (the part between the
/// first `{` and the next `}`, when non-empty) or of the whole key, modulo 16 384.
fn key_hash_slot(key: &[u8]) -> u16 {
    let hashed = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.iter()
                .position(|&b| b == b'}')
                .filter(|&close| close > 0)
                .map(|close| &rest[..close])
        })
        .unwrap_or(key);
    crc16::State::<crc16::XMODEM>::calculate(hashed) % SLOTS as u16
}

/// For every slot, a short tag that hashes to it. Built once, by counting in base 36 until
/// every slot has a tag (about 160 000 CRC16 computations, a few milliseconds).
static SLOT_TAGS: Lazy<Vec<String>> = Lazy::new(|| {
    let mut tags: Vec<Option<String>> = vec![None; SLOTS];
    let mut missing = SLOTS;
    let mut n: u64 = 0;
    // Bounded: 36^4 candidates are far more than enough to cover 16 384 slots.
    while missing > 0 && n < 36u64.pow(4) {
        let tag = base36(n);
        let slot = usize::from(key_hash_slot(tag.as_bytes()));
        if tags[slot].is_none() {
            tags[slot] = Some(tag);
            missing -= 1;
        }
        n += 1;
    }
    tags.into_iter()
        .map(|tag| tag.unwrap_or_default())
        .collect()
});

fn base36(mut n: u64) -> String {
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_matches_the_redis_cluster_spec() {
        // CRC16-XMODEM check value from the Redis Cluster spec.
        assert_eq!(
            crc16::State::<crc16::XMODEM>::calculate(b"123456789"),
            0x31c3
        );
        assert_eq!(
            key_hash_slot(b"{user1000}.following"),
            key_hash_slot(b"user1000")
        );
        assert_eq!(key_hash_slot(b"foo{}{bar}"), key_hash_slot(b"foo{}{bar}"));
        assert_ne!(key_hash_slot(b"foo{}{bar}"), key_hash_slot(b"bar"));
    }

    #[test]
    fn every_slot_has_a_tag() {
        assert!(SLOT_TAGS.iter().all(|t| !t.is_empty()));
    }

    #[test]
    fn per_slot_counter_shares_the_lock_keys_slot() {
        for key in ["lock:order:1", "lock:{user:7}:cart", "lock:caf\u{e9}", "x"] {
            let counter = counter_key("lock:", key, FencingCounter::PerSlot);
            assert_eq!(
                key_hash_slot(counter.as_bytes()),
                key_hash_slot(key.as_bytes()),
                "{key}"
            );
        }
    }

    #[test]
    fn per_prefix_counter_is_one_key() {
        assert_eq!(
            counter_key("lock:", "lock:a", FencingCounter::PerPrefix),
            counter_key("lock:", "lock:b", FencingCounter::PerPrefix)
        );
    }
}
