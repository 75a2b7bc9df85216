//! [`LockError`]: every way a lock call can fail.

use std::time::Duration;

use crate::util::escape::Escaped;
use crate::util::time::Shown;

/// The error type of every fallible call in this crate.
///
/// `Display` shows keys with `{:?}`-style escapes for control characters (a key may come
/// from request data); the `key` fields hold the key exactly. Durations in messages are
/// rounded (`250µs`, `102ms`, `1.5s`); the fields hold them exactly.
///
/// Match on the variant, or use the predicates [`is_contended`](Self::is_contended) and
/// [`is_lost`](Self::is_lost). The enum is `#[non_exhaustive]`: later releases may add
/// variants, so keep a `_` arm.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The wait budget ([`LockOptions::wait`](crate::options::LockOptions::wait)) was spent while another
    /// holder kept the key. `waited` is the time spent inside `acquire`, measured on a monotonic
    /// clock.
    #[error(
        "lock `{}` is held by another holder; gave up after waiting {}",
        Escaped(.key),
        Shown(*.waited)
    )]
    Contended {
        /// The full Redis key, prefix included.
        key: String,
        /// How long the acquire waited before giving up.
        waited: Duration,
    },
    /// This holder no longer owns the key: its lease expired, or the key was deleted or now
    /// holds another holder's token. Returned by release and extend, by a
    /// `#[distributed_lock]` fn with `on_lost = "abort"` (the default) whose lock was lost while
    /// its body ran, and by an idempotent call whose lock ended before its record was stored
    /// (nothing is stored; see `LockManager::idempotent`). Under Redlock a release reports it
    /// only when the token was on fewer than a quorum of nodes (otherwise
    /// [`ReleaseUnconfirmed`](Self::ReleaseUnconfirmed)).
    #[error("lock `{}` was lost: the key expired or holds another holder's token", Escaped(.key))]
    Lost {
        /// The full Redis key, prefix included.
        key: String,
    },
    /// Redlock: a release deleted the key on `confirmed` nodes, fewer than the quorum of
    /// `needed`, within the node timeout, and the nodes that did not answer in time may still
    /// hold it. Not [`Lost`](Self::Lost) (`is_lost()` is `false`): the lease had not ended and
    /// no quorum answered that the key holds another token, so no other holder can have had
    /// it. The compare-and-delete was sent to the late nodes, and it is retried in the
    /// background until they answer or the TTL ends: the key is gone from them by then at the
    /// latest, as after a dropped guard.
    #[error(
        "release of lock `{}` was confirmed by {confirmed} nodes within the node timeout, and a quorum needs {needed}; the late nodes are released in the background",
        Escaped(.key)
    )]
    ReleaseUnconfirmed {
        /// The full Redis key, prefix included.
        key: String,
        /// Nodes that answered within the node timeout that they deleted the key.
        confirmed: usize,
        /// The quorum: N/2 + 1 of the configured N.
        needed: usize,
    },
    /// Redis answered with an error, or the connection failed or timed out.
    #[error("redis error: {0}")]
    Redis(#[from] redis::RedisError),
    /// The key is unusable (for example empty). Checked before any network call.
    #[error("invalid lock key: {reason}")]
    InvalidKey {
        /// What is wrong with the key, and what was expected.
        reason: String,
    },
    /// An option is out of range (for example a TTL of zero). Checked before any network call.
    #[error("invalid lock options: {reason}")]
    InvalidOptions {
        /// Which option is wrong, its value and the accepted range.
        reason: String,
    },
    /// Redlock: fewer than a quorum of the configured nodes answered, so no quorum could be
    /// won. Returned after the first round, not after the whole wait budget.
    #[error("only {reachable} lock nodes answered; a quorum needs {needed}")]
    QuorumUnreachable {
        /// Nodes that answered in the round.
        reachable: usize,
        /// The quorum: N/2 + 1 of the configured N.
        needed: usize,
    },
    /// [`LockManagerBuilder::wait_for_replicas`](crate::builder::LockManagerBuilder::wait_for_replicas):
    /// fewer replicas than asked acknowledged an acquire or extend within the timeout. An
    /// acquire releases the key before returning this; an extend keeps the new TTL (Redis
    /// applied it on the primary), and the guard's deadline follows it. Never returned as
    /// [`Contended`](Self::Contended).
    #[error(
        "lock `{}` was written but only {acked} replicas acknowledged it within the timeout; {needed} were required",
        Escaped(.key)
    )]
    NotReplicated {
        /// The full Redis key, prefix included.
        key: String,
        /// Replicas that acknowledged.
        acked: usize,
        /// Replicas that were required.
        needed: usize,
    },
    /// The lock key holds a Redis value of another type than a string (a list, a hash, ...):
    /// something other than a lock client wrote it, so nobody holds it as a lock and waiting
    /// would never end. Returned by an acquire at once, before its wait budget; the key is left
    /// untouched. Rename the lock or remove the foreign key.
    #[error(
        "the key `{}` holds a Redis {}, not a lock; expected a string lock value or no key",
        Escaped(.key),
        Escaped(.found)
    )]
    NotALock {
        /// The full Redis key, prefix included.
        key: String,
        /// The Redis type the key holds (`TYPE`): `list`, `hash`, `set`, `zset`, `stream`.
        found: String,
    },
    /// [`default_manager`](crate::global::default_manager) was called (directly or by
    /// `#[distributed_lock]` without `manager = ..`) before
    /// [`set_default_manager`](crate::global::set_default_manager).
    #[error(
        "no default lock manager is set; call `lockcore::set_default_manager` at start-up or pass `manager = ..`"
    )]
    NoDefaultManager,
    /// A `#[distributed_lock(reentrant = false)]` fn was called while the same task already
    /// holds `key` through an enclosing `#[distributed_lock]` call (or, with `reentrant = true`,
    /// a nested call's keys are held only in part by its callers). Returned at once, before any
    /// network call: a second acquire would wait for the task's own lock until the wait budget
    /// ran out.
    #[error(
        "lock `{}` is already held by this task through an enclosing `#[distributed_lock]` call",
        Escaped(.key)
    )]
    AlreadyHeld {
        /// The full Redis key, prefix included.
        key: String,
    },
    /// An idempotency record exists for `key` but was stored for a request with another
    /// fingerprint (the same idempotency key reused for a different request body). The body
    /// did not run.
    #[error("idempotency key `{}` was first used for a request with another fingerprint", Escaped(.key))]
    IdempotencyMismatch {
        /// The idempotency key, as given (without the prefix).
        key: String,
    },
    /// An idempotency record for `key` cannot be used: the stored value does not deserialize
    /// into the return type (a changed type; the body is not run again), or a new value is
    /// larger than the record limit or does not serialize (nothing is stored).
    #[error("idempotency record `{}`: {reason}", Escaped(.key))]
    BadIdempotencyRecord {
        /// The idempotency key, as given (without the prefix).
        key: String,
        /// What is wrong, and what was expected.
        reason: String,
    },
    /// The manager was closed ([`LockManager::close`](crate::manager::LockManager::close)): it takes no
    /// new locks, and the guards it had handed out were released (an
    /// [`extend`](crate::guard::LockGuard::extend) of one returns this too). Returned at once, before
    /// any network call. Build a new manager to lock again.
    #[error("the lock manager was closed; build a new one to acquire locks")]
    Closed,
    /// [`set_default_manager`](crate::global::set_default_manager) was called a second time.
    #[error("the default lock manager is already set; it can be set only once per process")]
    DefaultManagerAlreadySet,
}

impl LockError {
    /// `true` for [`LockError::Contended`]: another holder kept the key for the whole wait
    /// budget. Typically mapped to HTTP 429 / "try again later".
    pub fn is_contended(&self) -> bool {
        matches!(self, LockError::Contended { .. })
    }

    /// `true` for [`LockError::Lost`]: this holder no longer owns the key.
    pub fn is_lost(&self) -> bool {
        matches!(self, LockError::Lost { .. })
    }

    /// `true` for [`LockError::AlreadyHeld`]: a non-reentrant nested call on a key this task
    /// already holds.
    pub fn is_already_held(&self) -> bool {
        matches!(self, LockError::AlreadyHeld { .. })
    }

    /// `true` for [`LockError::Redis`]: the backend failed or could not be reached.
    pub fn is_redis(&self) -> bool {
        matches!(self, LockError::Redis(_))
    }

    /// A refusal Redis Cluster answers before it runs a command (`TRYAGAIN`: a slot migration
    /// has split the script's keys; `ASK`, `MOVED`, `CLUSTERDOWN`): nothing was written, and
    /// the same call may succeed once the cluster settles.
    pub(crate) fn script_never_ran(&self) -> bool {
        use redis::{ErrorKind, ServerErrorKind};
        matches!(self, LockError::Redis(e) if matches!(
            e.kind(),
            ErrorKind::Server(
                ServerErrorKind::TryAgain
                    | ServerErrorKind::Ask
                    | ServerErrorKind::Moved
                    | ServerErrorKind::ClusterDown
            )
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every variant that shows a key shows it escaped: a key from request data cannot forge a
    /// log line or drive a terminal.
    #[test]
    fn every_key_in_a_message_is_escaped() {
        let key = || "lock:pay:\u{1b}[2J\nFAKE LOG LINE".to_owned();
        let errors = [
            LockError::Contended {
                key: key(),
                waited: Duration::ZERO,
            },
            LockError::Lost { key: key() },
            LockError::ReleaseUnconfirmed {
                key: key(),
                confirmed: 1,
                needed: 2,
            },
            LockError::NotReplicated {
                key: key(),
                acked: 0,
                needed: 1,
            },
            LockError::NotALock {
                key: key(),
                found: "list".to_owned(),
            },
            LockError::AlreadyHeld { key: key() },
            LockError::IdempotencyMismatch { key: key() },
            LockError::BadIdempotencyRecord {
                key: key(),
                reason: "x".to_owned(),
            },
        ];
        for error in errors {
            let shown = error.to_string();
            assert!(
                !shown.chars().any(char::is_control) && shown.contains(r"\u{1b}[2J\nFAKE"),
                "{error:?} shows {shown:?}"
            );
        }
    }
}
