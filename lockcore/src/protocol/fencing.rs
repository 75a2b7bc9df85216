//! Fencing tokens: a number minted by the acquire script that grows with every acquisition.
//!
//! The lock alone cannot stop a holder that was paused past its TTL (a GC pause, `SIGSTOP`, a
//! slow network) from writing after a new holder took over (Kleppmann, "How to do distributed
//! locking", 2016). The fencing token fixes that when the *resource* checks it: it accepts a
//! write only with a token newer than any it has seen. See [`FencedRedis`](crate::features::fenced::FencedRedis),
//! [`FenceGate`](crate::features::fenced::FenceGate) and the SQL pattern in the guide (`docs/src/fencing.md`).
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
    /// [`LockGuard::fencing_token`](crate::guard::LockGuard::fencing_token) is 0, which
    /// [`FencedRedis`](crate::FencedRedis) and [`FenceGate`](crate::FenceGate) always refuse
    /// (their error says that fencing is off). What it costs in safety: a holder paused past its
    /// TTL (GC, `SIGSTOP`, a slow network) can still write after the next holder took over, and
    /// nothing at the resource stops it; the lock alone is then only as good as the TTL.
    Off,
}

/// The fencing token of a guard acquired with [`FencingCounter::Off`]: never minted by a
/// counter (which starts at 1), refused by every fenced resource.
pub(crate) const NO_FENCING_TOKEN: u64 = 0;
