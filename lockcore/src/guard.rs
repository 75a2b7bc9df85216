//! [`LockGuard`]: a held lease, with release, extend and its state.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::backend::vote::Released;
use crate::error::LockError;
use crate::lease::live::LiveEntry;
use crate::lease::promotion::Promotion;
use crate::lease::state::{Lease, LeaseStatus, WriteLock};
use crate::lease::telemetry;
use crate::lease::watchdog::Registration;
use crate::options::LockOptions;
use crate::shared::Shared;

/// A held lock. Owned, `Send + Sync + 'static`: it can move to another task or thread.
///
/// Release it with [`release`](Self::release) to learn whether the lease was still yours. A
/// guard dropped without a completed `release` (also one known lost) never blocks: it spawns the compare-and-delete on the current
/// tokio runtime, or on the runtime the manager was built on when the dropping thread has none.
/// If no runtime accepts the task, the key expires with its TTL (logged through `tracing`).
///
/// With the watchdog on ([`LockOptions::watchdog`]) the lease is renewed in the background
/// while the guard lives; [`lost`](Self::lost) completes if that fails.
#[must_use = "dropping the guard releases the lock at once"]
pub struct LockGuard {
    shared: Arc<Shared>,
    lease: Arc<Lease>,
    /// Renewal by the watchdog; dropped (unregistered) on release or drop.
    renewal: Option<Registration>,
    /// The first renewal of a handed-over lease without the watchdog; dropped (cancelled) on
    /// release or drop.
    promotion: Option<Promotion>,
    /// Redis answered a release (or the manager's close released the key); `Drop` has nothing
    /// left to do.
    released: bool,
    /// This lease's place among the manager's live leases, for its close; removed on drop.
    _live: LiveEntry,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("key", &self.lease.key)
            .field("token", &self.token())
            .field("fencing_token", &self.lease.fencing_token)
            .field("deadline", &self.lease.deadline())
            .field("status", &self.lease.status())
            .field("watchdog", &self.renewal.is_some())
            .finish()
    }
}

impl LockGuard {
    pub(crate) fn new(shared: Arc<Shared>, lease: Lease, opts: &LockOptions) -> Self {
        let lease = Arc::new(lease);
        let renewal = opts.watchdog_enabled().then(|| {
            shared
                .watchdog
                .register(Arc::clone(&lease), opts.max_hold_value(), &shared.backend)
        });
        let promotion = (renewal.is_none() && lease.is_provisional())
            .then(|| crate::lease::promotion::spawn(&shared.backend, Arc::clone(&lease)));
        if renewal.is_none() {
            tracing::debug!(
                target: "lockcore",
                key = %crate::util::escape::Escaped(&lease.key),
                ttl_ms = crate::util::time::duration_ms(lease.ttl()),
                "lock acquired without the watchdog: the lease ends with its ttl unless extended (the explicit API's default; `#[distributed_lock]` turns the watchdog on)"
            );
        }
        let live = shared.live.register(&lease);
        LockGuard {
            shared,
            lease,
            renewal,
            promotion,
            released: false,
            _live: live,
        }
    }

    /// Gives the lock back at once, without its minimum hold (no work ran under it): a guard
    /// won while its manager was closing, which the acquire call does not hand out. The
    /// compare-and-delete runs in the background, among the releases the manager's close waits
    /// for; a lease that close took already is released by close.
    pub(crate) fn give_back(mut self) {
        self.renewal = None;
        self.promotion = None;
        self.released = true;
        if self.lease.settle(LeaseStatus::Closed) {
            telemetry::released(&self.lease, "closed");
            self.shared.backend.spawn_release(
                self.lease.key.clone(),
                self.lease.value.clone(),
                self.lease.ttl(),
            );
        }
    }

    /// The full Redis key, prefix included.
    pub fn key(&self) -> &str {
        &self.lease.key
    }

    /// The random 128-bit token at the start of the key's value: a hyphenated UUID v4 string,
    /// fresh for every acquisition. The value also carries the holder metadata: see
    /// [`stored_value`](Self::stored_value).
    pub fn token(&self) -> &str {
        self.lease.value.token()
    }

    /// This lease's lock value: the [`token`](Self::token), a space and the holder metadata as
    /// compact JSON (see [`keyspace`](crate::keyspace)). For a lock it is the exact value stored
    /// at the key; release, extend and renewal recognise the holder by its token. For a share (a
    /// semaphore's permit, a reader's share) the key holds the shares marker instead
    /// ([`SHARES_MARKER`](crate::keyspace::SHARES_MARKER)), and the token is this share's member
    /// of the key's share set.
    pub fn stored_value(&self) -> &str {
        self.lease.value.as_str()
    }

    /// The fencing token: strictly greater than the fencing token of every earlier acquisition
    /// of this key by any client, as long as the counter survives (see
    /// [`FencingCounter`](crate::protocol::fencing::FencingCounter) for when it does not). With the default
    /// per-prefix counter this holds across all keys under the prefix; per slot, across keys of
    /// one slot. Under Redlock the same holds across quorums, as long as no node loses its
    /// counter (see "Redlock" in the guide, `docs/src/redlock.md`). Extend and renewal keep it.
    /// Pass it to the resource ([`FencedRedis`](crate::FencedRedis),
    /// [`FenceGate`](crate::FenceGate), or SQL), which rejects writes with an older token.
    pub fn fencing_token(&self) -> u64 {
        self.lease.fencing_token
    }

    /// Until when the lease is valid, on the local monotonic clock: the start of the successful
    /// attempt (or of the latest extend or watchdog renewal) + ttl − drift allowance
    /// (ttl·1 % + 2 ms, as in the Redlock spec).
    ///
    /// A lock handed over by a release (single node, [`LockOptions::handoff`]) starts with its
    /// claim window instead of the ttl (when the ttl is longer): 500 ms plus twice the waiter's
    /// round trip to Redis, counted from the waiter's latest queued attempt, because that is
    /// the TTL the release set in Redis. Its first renewal, due a third of the way in (by the
    /// watchdog, or by a one-off background extend), sets the full ttl in Redis and moves the
    /// deadline with it.
    pub fn deadline(&self) -> Instant {
        self.lease.deadline()
    }

    /// Time left until [`deadline`](Self::deadline); zero once it has passed or the lease is
    /// known lost. It always tells what Redis guarantees now: right after a hand-over that is
    /// the claim window (a 10 s lock reads about 330 ms), and the full ttl once the first
    /// renewal, a third of the way in, has set it. A body that needs more time than the claim
    /// window does not have to do anything: the renewal is on its way. A body that ends sooner
    /// never sends it, which is why the renewal waits (promoting at once would cost one more
    /// round trip on every hand-over).
    pub fn remaining(&self) -> Duration {
        self.lease.remaining()
    }

    /// Local state, no network call: `true` until the lease is known lost or its deadline
    /// passes.
    pub fn is_held(&self) -> bool {
        self.lease.is_held()
    }

    /// Completes when the lock is lost: when the watchdog finds the key expired, deleted or
    /// holding another token, when it cannot renew before the deadline (Redis unreachable, or
    /// its runtime blocked), when `max_hold` runs out, when an [`extend`](Self::extend) reports
    /// [`LockError::Lost`], when the manager's [`close`](crate::manager::LockManager::close) released
    /// the key, or, without renewal, when the deadline passes. Cancel-safe.
    ///
    /// ```no_run
    /// # async fn demo(locks: lockcore::LockManager) -> Result<(), lockcore::LockError> {
    /// # async fn long_work() {}
    /// use std::time::Duration;
    /// let opts = lockcore::LockOptions::new(Duration::from_secs(3)).watchdog(true);
    /// let guard = locks.acquire("report:daily", &opts).await?;
    /// tokio::select! {
    ///     () = long_work() => guard.release().await?,
    ///     () = guard.lost() => { /* stop writing: another holder may be in */ }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn lost(&self) {
        self.lease.lost().await;
    }

    /// Whether the watchdog renews this guard's lease.
    pub(crate) fn is_watched(&self) -> bool {
        self.renewal.is_some()
    }

    /// Releases the lock with an atomic compare-and-delete, and stops its renewal. With
    /// [`LockOptions::hold_at_least`] the key is kept (still holding this token) until the
    /// minimum after the acquire has passed by the server's clock, and deleted by its TTL then
    /// (also a lock handed over by the queue whose key still lives its claim window: the same
    /// script sets the TTL to what is left of the minimum); this counts as released. Dropping
    /// the guard and the manager's close keep the minimum the same way. After the
    /// manager's [`close`](crate::manager::LockManager::close) (which released the key already) it
    /// returns `Ok(())` with no network call.
    ///
    /// # Errors
    /// - [`LockError::Lost`] when the lease was already known lost, or the key had expired, was
    ///   deleted, or holds another holder's token; another holder's key is left untouched.
    /// - [`LockError::Redis`] when Redis could not be reached; a background compare-and-delete
    ///   is then spawned, as on drop.
    /// - Redlock: [`LockError::ReleaseUnconfirmed`] when the key was deleted on fewer than a
    ///   quorum within the node timeout and the nodes that had not answered yet may hold it
    ///   (not a loss; they are released in the background), [`LockError::QuorumUnreachable`]
    ///   when fewer than a quorum of nodes could be reached (released in the background, as on
    ///   drop).
    pub async fn release(mut self) -> Result<(), LockError> {
        self.renewal = None;
        self.promotion = None;
        if self.lease.status() == LeaseStatus::Closed {
            // The manager's close released the key on this guard's behalf.
            self.released = true;
            return Ok(());
        }
        let released = self
            .shared
            .backend
            .release(
                &self.lease.key,
                &self.lease.value,
                self.lease.ttl(),
                Some(self.lease.deadline()),
                self.lease.hold_at_least,
            )
            .instrument(telemetry::release_span(&self.lease))
            .await?;
        self.released = true;
        let within_lease = Instant::now() < self.lease.deadline();
        let was_held = self.lease.settle(LeaseStatus::Released);
        let ours = match released {
            Released::Deleted => true,
            Released::Missing => false,
            Released::HeldByOther => false,
            Released::Unconfirmed { confirmed, needed } => {
                // The late nodes still get the compare-and-delete, retried until they answer.
                self.shared.backend.spawn_release_held(
                    self.lease.key.clone(),
                    self.lease.value.clone(),
                    self.lease.ttl(),
                    self.lease.hold_at_least,
                );
                // Before the deadline the key cannot have expired on the late nodes.
                if was_held && within_lease {
                    telemetry::released(&self.lease, "unconfirmed");
                    return Err(LockError::ReleaseUnconfirmed {
                        key: self.lease.key.clone(),
                        confirmed,
                        needed,
                    });
                }
                false
            }
        };
        let outcome = if ours && was_held { "released" } else { "lost" };
        telemetry::released(&self.lease, outcome);
        if ours && was_held {
            Ok(())
        } else {
            Err(self.lost_error())
        }
    }

    /// Sets the lease's TTL to `ttl` from now, with an atomic compare-and-`PEXPIRE`. It sets the
    /// TTL (never adds to it) and never re-creates a missing key. On success the
    /// [`deadline`](Self::deadline) moves to this call's start + `ttl` − drift allowance, and
    /// the watchdog (if on) renews with the new TTL from then on.
    ///
    /// # Errors
    /// - [`LockError::InvalidOptions`] when `ttl` is out of range (1 ms ..= 7 days) or not a
    ///   whole number of milliseconds.
    /// - [`LockError::Lost`] when the lease was already known lost, or the key had expired, was
    ///   deleted, or holds another holder's token; the guard is then lost.
    /// - [`LockError::Closed`] when the manager was closed (it released the key).
    /// - [`LockError::Redis`] when Redis could not be reached; the guard's state is unchanged.
    pub async fn extend(&mut self, ttl: Duration) -> Result<(), LockError> {
        LockOptions::new(ttl).validate()?;
        if self.lease.status() != LeaseStatus::Held {
            return Err(self.lost_error());
        }
        // Serialised with the watchdog's renewals of this lease: a renewal built from the old
        // ttl can never land after this extend and cut the key short behind the guard's back.
        let write = self.lease.write_lock().await;
        let extended = self.extend_under(&write, ttl).await;
        drop(write);
        if let Some(renewal) = &self.renewal {
            // The next renewal is planned from what this extend recorded (or, after an error,
            // from what was recorded before).
            renewal.reschedule();
        }
        extended
    }

    async fn extend_under(&self, write: &WriteLock, ttl: Duration) -> Result<(), LockError> {
        if self.lease.status() != LeaseStatus::Held {
            return Err(self.lost_error());
        }
        let start = Instant::now();
        let deadline = self.lease.deadline();
        let extended = match self
            .shared
            .backend
            .extend(&self.lease.key, self.lease.value.renew_arg(), ttl)
            .await
        {
            Ok(extended) => extended,
            Err(err @ LockError::NotReplicated { .. }) => {
                // Redis applied the new TTL; only its replication is short.
                self.lease.renewed(write, start, ttl);
                return Err(err);
            }
            Err(err) => return Err(err),
        };
        // Redlock: the extension counts only if it completed within the remaining validity.
        if extended && Instant::now() < deadline {
            self.lease.renewed(write, start, ttl);
            Ok(())
        } else {
            if self.lease.settle(LeaseStatus::Lost) {
                telemetry::lost(
                    &self.lease,
                    "extend_refused",
                    "extend found the key expired or held by another token; lock lost",
                );
            }
            Err(self.lost_error())
        }
    }

    /// The attribute's key template, or `"-"`: a telemetry label.
    pub(crate) fn key_template(&self) -> &'static str {
        self.lease.key_template.unwrap_or(telemetry::NO_TEMPLATE)
    }

    /// The error of a call on a lease that is not held: [`LockError::Closed`] after the
    /// manager's close, [`LockError::Lost`] otherwise.
    fn lost_error(&self) -> LockError {
        if self.lease.status() == LeaseStatus::Closed {
            return LockError::Closed;
        }
        LockError::Lost {
            key: self.lease.key.clone(),
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        self.renewal = None;
        self.promotion = None;
        // Also for a lease known lost: a refused extend or a starved watchdog may leave this
        // token on (some) nodes, and a compare-and-delete never touches another holder's key.
        if !self.released && self.lease.status() != LeaseStatus::Closed {
            telemetry::released(&self.lease, "dropped");
            self.lease.settle(LeaseStatus::Released);
            self.shared.backend.spawn_release_held(
                self.lease.key.clone(),
                self.lease.value.clone(),
                self.lease.ttl(),
                self.lease.hold_at_least,
            );
        }
    }
}
