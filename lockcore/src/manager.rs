//! [`LockManager`]: the acquire loop, and what a manager shares with its guards.

use std::sync::Arc;

use tokio::time::Instant;
use tracing::Instrument;

use crate::backend::vote::{Released, Vote};
use crate::backend::waiting::{Progress, Request, Won};
use crate::backend::{AttemptRequest, InFlightCall};
use crate::error::LockError;
use crate::guard::LockGuard;
use crate::lease::state::{Lease, LeaseStatus};
use crate::lease::telemetry::{self, AcquireProbe};
use crate::options::LockOptions;
use crate::protocol::keyspace::{counter_key, full_key};
use crate::protocol::value::{LockValue, Share};
use crate::shared::Shared;

/// A handle that hands out locks on one Redis deployment: a single node, a Sentinel-resolved
/// primary, a Redis Cluster, or Redlock over several independent masters, as chosen by
/// [`LockManagerBuilder`](crate::builder::LockManagerBuilder). Cheap to [`Clone`]: an `Arc` inside, and every clone shares the
/// same connections and background tasks.
///
/// # Behavior
/// - Connections, per topology: a single node is one redis-rs
///   [`ConnectionManager`](redis::aio::ConnectionManager) (one multiplexed connection that
///   reconnects in the background after a failure); Redlock is one such connection per node; a
///   cluster is redis-rs' async cluster client, which routes each script by its key's slot and
///   follows MOVED, ASK and fail-overs; a Sentinel primary is resolved through the sentinels
///   and resolved again after a fail-over. Except under Redlock (which always polls), hand-off
///   wake-ups arrive over one pub/sub connection per manager. `TCP_NODELAY` is off by default (see
///   [`LockManagerBuilder::tcp_nodelay`](crate::builder::LockManagerBuilder::tcp_nodelay)).
/// - Commands time out after the builder's response timeout (default 500 ms) and connection
///   attempts after the connection timeout (default 1 s). A backend that is down therefore fails
///   an acquire with [`LockError::Redis`] within about one connection timeout (connection
///   refused) or two response timeouts (a server that does not answer: the attempt, then its
///   cleanup); it never turns into [`LockError::Contended`].
/// - Keys are the prefix (default `"lock:"`) followed by the caller's key, byte for byte.
/// - Background work (the watchdog, hand-off wake-ups, releases of dropped guards) runs on the
///   caller's tokio runtime, or on the one the manager was built on. A manager outlives the
///   runtime it was built on and serves several runtimes at once (`cargo test` runs
///   `#[tokio::test]`s in parallel, a runtime each): once the runtime that made its
///   connections has shut down, the next call re-makes them on lockcore's background runtime
///   (one thread, started then) and every later command of that connection is sent from
///   there, so no call fails when some caller's runtime ends, nor one in flight on another
///   runtime. A watchdog scheduler or wake-up listener that a shutting-down runtime drops
///   while it still serves leases or waiters restarts at once on that background runtime.
///   While the manager's own runtime runs, none of this applies: the check costs one atomic
///   load per command. What remains: the tasks of the runtime that shut down end with it (a
///   dropped guard's background release; a command of that runtime awaiting its reply), and
///   such a key expires with its TTL; and while the manager's runtime runs, a reconnect that
///   redis-rs starts after a connection failure runs on the runtime of the call that noticed
///   it, so if that runtime ends later, the next command fails once with
///   [`LockError::Redis`] and reconnects. So one (default) manager serves a runtime per test.
///
/// ```no_run
/// # async fn demo() -> Result<(), lockcore::LockError> {
/// use std::time::Duration;
/// use lockcore::{LockManager, LockOptions};
///
/// let locks = LockManager::connect("redis://127.0.0.1:6380/").await?;
/// let opts = LockOptions::new(Duration::from_secs(10)).wait(Duration::from_secs(2));
/// let guard = locks.acquire("order:lock:product:42", &opts).await?;
/// // ... read the stock row, check it, write it back ...
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LockManager {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for LockManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockManager")
            .field("key_prefix", &self.shared.key_prefix)
            .field("default_options", &self.shared.default_options)
            .finish_non_exhaustive()
    }
}

impl LockManager {
    pub(crate) fn new(shared: Shared) -> Self {
        LockManager {
            shared: Arc::new(shared),
        }
    }

    /// The prefix put before every key, e.g. `"lock:"`.
    pub fn key_prefix(&self) -> &str {
        &self.shared.key_prefix
    }

    /// The options used by `#[distributed_lock]` for what the attribute does not set.
    pub fn default_options(&self) -> &LockOptions {
        &self.shared.default_options
    }

    /// Acquires the lock on `key` (the manager's prefix is put in front), waiting until
    /// `opts`' wait budget is spent. On a single node with [`LockOptions::handoff`] on (the
    /// default) a contended call queues in Redis and is handed the lock by the release, re-checking
    /// at least every 250 ms; otherwise (Redlock, or `handoff(false)`) it retries with exponential
    /// backoff and full jitter. Neither sleeps past the holder's remaining TTL.
    ///
    /// Each attempt draws a fresh random 128-bit token (UUID v4) and sends
    /// `SET <prefix><key> <value> NX PX <ttl_ms>` (to every node, for Redlock), where the value
    /// is the token followed by the holder metadata (see [`keyspace`](crate::keyspace)); the fencing
    /// token is minted by the same script. The guard's validity is measured from the start of
    /// the successful attempt.
    ///
    /// Dropping the returned future at any `.await` leaves no lock behind: an attempt in flight
    /// is followed by a compare-and-delete of its token, spawned on the runtime.
    ///
    /// # Errors
    /// - [`LockError::InvalidKey`] for an empty key, [`LockError::InvalidOptions`] for
    ///   out-of-range options: both before any network call.
    /// - [`LockError::InvalidOptions`] also when an attempt finds the key held as a semaphore's
    ///   permits ([`LockManager::semaphore`]), which a plain lock is never granted; the reason
    ///   names the key and the number of permits. (Readers' shares are waited for.)
    /// - [`LockError::Contended`] when another holder kept the key for the whole wait budget.
    /// - [`LockError::Redis`] (one node) at the first backend failure, without retrying: a down
    ///   backend fails fast. If the failed request may have set the key (a lost reply), a
    ///   compare-and-delete of the token is sent before the error returns, and retried in the
    ///   background if that fails too, so no orphan lock outlives the error.
    /// - [`LockError::QuorumUnreachable`] (Redlock) after the first round in which fewer than a
    ///   quorum of nodes answered.
    pub async fn acquire(&self, key: &str, opts: &LockOptions) -> Result<LockGuard, LockError> {
        let key = self.checked_key(key, opts)?;
        self.acquire_checked(key, opts).await
    }

    /// [`acquire`](Self::acquire) of a full key that is already checked (it may be one of
    /// lockcore's reserved names, e.g. an idempotency record's lock), with validated `opts`.
    pub(crate) async fn acquire_checked(
        &self,
        key: String,
        opts: &LockOptions,
    ) -> Result<LockGuard, LockError> {
        self.acquire_checked_as(key, opts, None).await
    }

    /// [`acquire_checked`](Self::acquire_checked) of the lock itself (`share` `None`) or of one
    /// share of it (a semaphore's permit, a reader's share).
    pub(crate) async fn acquire_checked_as(
        &self,
        key: String,
        opts: &LockOptions,
        share: Option<Share>,
    ) -> Result<LockGuard, LockError> {
        let call = self.shared.backend.start_call()?;
        let probe = AcquireProbe::start("", &key, opts.key_template_value());
        let result = self
            .acquire_probed(key, opts, share, &probe, call)
            .instrument(probe.span())
            .await;
        probe.finish(result.as_ref().map(|guard| Some(guard.fencing_token())));
        result
    }

    async fn acquire_probed(
        &self,
        key: String,
        opts: &LockOptions,
        share: Option<Share>,
        probe: &AcquireProbe,
        call: InFlightCall,
    ) -> Result<LockGuard, LockError> {
        let counter_key = self.counter_key(&key);
        let request = Request {
            key: &key,
            counter_key: &counter_key,
            opts,
            mint: || self.new_value_as(opts, share),
        };
        let won = self.shared.backend.acquire(&request, probe).await?;
        self.guard(key.clone(), won, opts, call).await
    }

    /// The guard of a lock `won` on `key` by `call`, unless the manager was closed meanwhile
    /// (see [`admit`](Self::admit)).
    ///
    /// # Errors
    /// [`LockError::Closed`], once the lock was given back.
    pub(crate) async fn guard(
        &self,
        key: String,
        won: Won,
        opts: &LockOptions,
        call: InFlightCall,
    ) -> Result<LockGuard, LockError> {
        let guard = self.new_guard(key, won, opts);
        let mut admitted = self.admit(vec![guard], call).await?;
        admitted.pop().ok_or(LockError::Closed)
    }

    /// Hands `guards`, won by the acquire `call`, to the caller, unless the manager was closed
    /// since the call started: then each is given back (released at once, without a minimum
    /// hold: no work ran under it) and, once every release in flight has finished, the call
    /// fails. So an acquire in flight across [`close`](Self::close) either holds what it
    /// returns or leaves nothing behind, and close, which waits for `call`, returns after
    /// the give-back. Cancel-safe: the releases are spawned first.
    ///
    /// # Errors
    /// [`LockError::Closed`].
    pub(crate) async fn admit(
        &self,
        guards: Vec<LockGuard>,
        call: InFlightCall,
    ) -> Result<Vec<LockGuard>, LockError> {
        // Each lease was registered among the live ones before this check: a close that
        // drained them before took them (and releases them); one that drains them later finds
        // the manager closed here.
        if !self.shared.live.is_closed() {
            return Ok(guards);
        }
        for guard in guards {
            guard.give_back();
        }
        // The give-backs are in flight now; this call no longer is.
        drop(call);
        self.shared.backend.releases_settled().await;
        Err(LockError::Closed)
    }

    /// The guard of a lock `won` on `key`, as it is won: [`admit`](Self::admit) decides
    /// whether the caller gets it.
    pub(crate) fn new_guard(&self, key: String, won: Won, opts: &LockOptions) -> LockGuard {
        let Won {
            value,
            fencing_token,
            attempt_start,
            claim,
        } = won;
        let ttl = opts.ttl();
        let lease = match claim {
            Some(claim) => Lease::handed_over(key, value, fencing_token, ttl, claim, attempt_start),
            None => Lease::new(key, value, fencing_token, ttl, attempt_start),
        }
        .with_key_template(opts.key_template_value())
        .with_hold_at_least(opts.hold_at_least_value());
        LockGuard::new(Arc::clone(&self.shared), lease, opts)
    }

    /// Makes exactly one attempt to acquire `key`. It never joins the waiter queue.
    ///
    /// Returns `Ok(None)` when another holder has the key, or (single node) when the key is free
    /// but a live waiter is queued ahead; `opts`' wait budget is ignored.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire), except that it never returns
    /// [`LockError::Contended`].
    pub async fn try_acquire(
        &self,
        key: &str,
        opts: &LockOptions,
    ) -> Result<Option<LockGuard>, LockError> {
        self.try_acquire_as(key, opts, None).await
    }

    /// [`try_acquire`](Self::try_acquire) of the lock itself or of one share of it.
    pub(crate) async fn try_acquire_as(
        &self,
        key: &str,
        opts: &LockOptions,
        share: Option<Share>,
    ) -> Result<Option<LockGuard>, LockError> {
        let prefix = &self.shared.key_prefix;
        let probe = AcquireProbe::start(prefix, key, opts.key_template_value());
        probe.attempt();
        let result = self
            .try_acquire_once(key, opts, share)
            .instrument(probe.span())
            .await;
        probe.finish(
            result
                .as_ref()
                .map(|guard| guard.as_ref().map(LockGuard::fencing_token)),
        );
        result
    }

    async fn try_acquire_once(
        &self,
        key: &str,
        opts: &LockOptions,
        share: Option<Share>,
    ) -> Result<Option<LockGuard>, LockError> {
        let key = self.checked_key(key, opts)?;
        let call = self.shared.backend.start_call()?;
        let counter_key = self.counter_key(&key);
        let value = self.new_value_as(opts, share);
        let attempt_start = Instant::now();
        let request = AttemptRequest {
            key: &key,
            counter_key: &counter_key,
            value: &value,
            ttl: opts.ttl(),
            queue: None,
            give_up_at: None,
            stamp: opts.hold_at_least_value().is_some(),
        };
        match self.shared.backend.attempt(&request, attempt_start).await? {
            Vote::Won {
                fencing_token,
                stored,
            } => {
                let won = Won {
                    value: stored.map_or(value, LockValue::stored),
                    fencing_token,
                    attempt_start,
                    claim: None,
                };
                Ok(Some(self.guard(key, won, opts, call).await?))
            }
            Vote::Lost { .. } => Ok(None),
        }
    }

    /// [`LockError::Closed`] once [`close`](Self::close) was called.
    pub(crate) fn ensure_open(&self) -> Result<(), LockError> {
        self.shared.backend.ensure_open()
    }

    /// Releases every live guard of this manager (a compare-and-delete of each, as its release
    /// does, sent concurrently; a job lock keeps its [minimum](LockOptions::hold_at_least)),
    /// waits for every release still in flight (of guards dropped just before, of cancelled
    /// acquires and attribute calls), stops its background work (the watchdog, whose leases are
    /// now released; the hand-off listener; the Sentinel fail-over subscription), and makes
    /// every later acquire on it, and on its clones, fail at once with [`LockError::Closed`]. A
    /// call waiting in `acquire` (queued or in backoff) wakes at once, withdraws from the queue
    /// and ends with that error; an acquire whose lock is won while the manager closes gives it
    /// back and returns that error too (it never returns a guard that holds nothing). `close`
    /// waits for every such acquire in flight (an attempt whose reply is on its way ends within
    /// the response timeout; Redlock: the node timeout) and for its give-back or withdrawal,
    /// for at most 10 s: that cap only matters for an acquire future that is kept but no
    /// longer polled (a warning is logged, and its give-back happens when it is polled again
    /// or dropped).
    /// When `close` returns, no release is in flight and no acquire of this manager can still
    /// take a key: the runtime may end.
    ///
    /// The work runs in a task it spawns on the runtime, so a `close` whose future is dropped
    /// (a timeout around it) still releases everything; a second call waits for that work and
    /// releases what was acquired since.
    ///
    /// The guards stay valid values: their [`release`](LockGuard::release) then returns
    /// `Ok(())` with no network call, [`is_held`](LockGuard::is_held) is `false`, and
    /// [`lost`](LockGuard::lost) completes, so a body still running under one learns that it
    /// no longer holds the lock. Call it once the work is done, for example after a web
    /// server's graceful shutdown has drained the requests in flight:
    ///
    /// ```no_run
    /// # async fn demo(locks: lockcore::LockManager) -> Result<(), lockcore::LockError> {
    /// tokio::signal::ctrl_c().await.ok();
    /// // ... stop accepting work, wait for the requests in flight ...
    /// locks.close().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// Without it, a guard dropped while the runtime shuts down (as `main` returns) may leave
    /// its key to expire with its TTL: no runtime is left to run the release.
    ///
    /// # Errors
    /// [`LockError::Redis`] (or, under Redlock, [`LockError::QuorumUnreachable`]) for the first
    /// of this call's releases that could not be sent; every other guard is released anyway.
    /// A release that failed is retried in the background and `close` waits for it: with Redis
    /// unreachable it returns once the retries give up (16 attempts with backoff, never past
    /// the lease's TTL), and the key expires with its TTL. So its wait is bounded by the
    /// acquires in flight (one response timeout, capped at 10 s) plus those retries.
    pub async fn close(&self) -> Result<(), LockError> {
        // Everything up to the spawn happens at the first poll, before any `.await`.
        self.shared.backend.close();
        let leases = self.shared.live.close();
        let (done, released) = tokio::sync::oneshot::channel();
        let shared = Arc::clone(&self.shared);
        self.shared.backend.spawn_tracked(async move {
            let _ = done.send(release_closed(&shared, leases).await);
        });
        // The task dropped unrun: its runtime is shutting down, and this call with it.
        let result = released.await.unwrap_or(Ok(()));
        // The acquires in flight first: each ends having spawned its give-back, if any.
        self.shared.backend.calls_settled().await;
        self.shared.backend.releases_settled().await;
        result
    }

    pub(crate) fn checked_key(&self, key: &str, opts: &LockOptions) -> Result<String, LockError> {
        self.ensure_open()?;
        let key = full_key(&self.shared.key_prefix, key)?;
        opts.validate()?;
        self.shared.backend.check(opts)?;
        Ok(key)
    }

    /// The fencing counter key of `key` (full key): the counter its acquire increments.
    pub(crate) fn counter_key(&self, key: &str) -> String {
        counter_key(&self.shared.key_prefix, key, self.shared.fencing_counter)
    }

    /// How many leases of this manager the watchdog is renewing right now. Returns to zero once
    /// every watchdog guard is released, dropped or lost, or the manager's
    /// [`close`](Self::close) released them.
    pub fn live_renewals(&self) -> usize {
        self.shared.watchdog.live()
    }

    /// `true` when `other` is a clone of this manager (one shared state). Used by the
    /// attribute's reentrancy check.
    pub(crate) fn same_as(&self, other: &LockManager) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// Every node, for data that lives beside the locks (idempotency records).
    #[cfg(feature = "idempotency")]
    pub(crate) fn data_nodes(&self) -> crate::backend::DataNodes {
        self.shared.backend.nodes()
    }

    /// The state this manager shares with its guards.
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// A fresh lock value: a random 128-bit token (UUID v4) and the holder metadata.
    pub(crate) fn new_value(&self, opts: &LockOptions) -> LockValue {
        self.new_value_as(opts, None)
    }

    /// A fresh lock value of the lock itself, or of one share of it.
    fn new_value_as(&self, opts: &LockOptions, share: Option<Share>) -> LockValue {
        match share {
            None => self.shared.holder.mint(opts.key_template_value()),
            Some(share) => self
                .shared
                .holder
                .mint_share(opts.key_template_value(), share),
        }
    }
}

/// Releases `leases`, taken from a closing manager's live ones, on their guards' behalf: each
/// that is still held is marked closed and released (keeping its minimum hold). A release that
/// failed, or that nodes which did not answer in time may still hold (Redlock), is retried in
/// the background, among the releases the close waits for.
async fn release_closed(shared: &Shared, leases: Vec<Arc<Lease>>) -> Result<(), LockError> {
    let releases = leases.into_iter().map(|lease| async move {
        if !lease.settle(LeaseStatus::Closed) {
            return Ok(());
        }
        telemetry::released(&lease, "closed");
        let hold = lease.hold_at_least;
        let released = shared
            .backend
            .release(&lease.key, &lease.value, lease.ttl(), None, hold)
            .await;
        if !matches!(
            released,
            Ok(Released::Deleted | Released::Missing | Released::HeldByOther)
        ) {
            let (key, value) = (lease.key.clone(), lease.value.clone());
            shared
                .backend
                .spawn_release_held(key, value, lease.ttl(), hold);
        }
        released.map(|_| ())
    });
    let released: Vec<Result<(), LockError>> = futures_util::future::join_all(releases).await;
    released.into_iter().collect()
}
