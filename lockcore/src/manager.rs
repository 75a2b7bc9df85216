//! [`LockManager`]: the acquire loop, and what a manager shares with its guards.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::backend::AttemptRequest;
use crate::builder::LockManagerBuilder;
use crate::defer::OnDrop;
use crate::fencing;
use crate::guard::LockGuard;
use crate::handoff::{self, Grant, Handoff};
use crate::key::full_key;
use crate::lease::Lease;
use crate::shared::Shared;
use crate::single::QueueTicket;
use crate::telemetry::AcquireProbe;
use crate::vote::Vote;
use crate::{LockError, LockOptions};

/// A handle that hands out locks on one Redis deployment: a single node, a Sentinel-resolved
/// primary, a Redis Cluster, or Redlock over several independent masters, as chosen by
/// [`LockManagerBuilder`]. Cheap to [`Clone`]: an `Arc` inside, and every clone shares the
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
///   [`LockManagerBuilder::tcp_nodelay`]).
/// - Commands time out after the builder's response timeout (default 500 ms) and connection
///   attempts after the connection timeout (default 1 s). A backend that is down therefore fails
///   an acquire with [`LockError::Redis`] within about one connection timeout (connection
///   refused) or two response timeouts (a server that does not answer: the attempt, then its
///   cleanup); it never turns into [`LockError::Contended`].
/// - Keys are the prefix (default `"lock:"`) followed by the caller's key, byte for byte.
/// - Background work (the watchdog, hand-off wake-ups, releases of dropped guards) runs on the
///   caller's tokio runtime, or on the one the manager was built on. A manager outlives a
///   runtime that shuts down, but the connection made on that runtime breaks: the next command
///   fails with [`LockError::Redis`] and the connection is re-made on the caller's runtime.
///   With a runtime per test (`#[tokio::test]`), build a manager per test.
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

/// The outcome of one `SET NX PX` attempt.
enum Attempt {
    Acquired(LockGuard),
    /// Another holder has the key; its remaining TTL when Redis reported one.
    Held {
        holder_ttl: Option<Duration>,
    },
}

impl LockManager {
    pub(crate) fn new(shared: Shared) -> Self {
        LockManager {
            shared: Arc::new(shared),
        }
    }

    /// Connects to one Redis node with the default options (prefix `"lock:"`, ttl 30 s,
    /// wait 5 s). Same as `LockManager::builder().url(url).build().await`.
    ///
    /// # Errors
    /// [`LockError::Redis`] when the URL is malformed or the node cannot be reached within the
    /// connection timeout (1 s by default).
    pub async fn connect(url: &str) -> Result<LockManager, LockError> {
        LockManager::builder().url(url).build().await
    }

    /// A builder for a manager with a custom prefix, default options or timeouts.
    pub fn builder() -> LockManagerBuilder {
        LockManagerBuilder::default()
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
    /// is the token followed by the holder metadata (see [`holder`](crate::holder)); the fencing
    /// token is minted by the same script. The guard's validity is measured from the start of
    /// the successful attempt.
    ///
    /// Dropping the returned future at any `.await` leaves no lock behind: an attempt in flight
    /// is followed by a compare-and-delete of its token, spawned on the runtime.
    ///
    /// # Errors
    /// - [`LockError::InvalidKey`] for an empty key, [`LockError::InvalidOptions`] for
    ///   out-of-range options: both before any network call.
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
        let probe = AcquireProbe::start("", &key, opts.key_template_value());
        let result = self
            .acquire_probed(key, opts, &probe)
            .instrument(probe.span())
            .await;
        probe.finish(&result.as_ref().map(Some));
        result
    }

    async fn acquire_probed(
        &self,
        key: String,
        opts: &LockOptions,
        probe: &AcquireProbe,
    ) -> Result<LockGuard, LockError> {
        let started = Instant::now();
        let mut backoff = opts.backoff();
        // On one node the waiter queue knows a waiter by its token, so one token serves the
        // whole call; Redlock draws one per attempt, so that a late cleanup of a failed attempt
        // can never touch a later attempt's lock.
        let handoff = self.shared.backend.handoff();
        let call_token = handoff.map(|_| self.new_value(opts));
        // Register for wake-ups before the first attempt: the attempt that finds the key held
        // queues this waiter, so no release can slip between that check and the wait.
        let waiter = match (handoff, &call_token) {
            (Some(handoff), Some(value))
                if opts.handoff_enabled() && !opts.wait_budget().is_zero() =>
            {
                Some(handoff.register(value))
            }
            _ => None,
        };
        // Unless it acquired, a waiter that goes takes its queue entry (and a lock just handed
        // to it) back, in the background.
        let withdraw = match (&waiter, &call_token) {
            (Some(_), Some(value)) => Some(OnDrop::new(|| {
                self.shared
                    .backend
                    .spawn_release(key.clone(), value.clone(), opts.ttl());
            })),
            _ => None,
        };
        if waiter.is_some() {
            probe.queued();
        }
        let wake_channel = waiter.as_ref().and(handoff).map(|h| Handoff::channel(h));
        for seq in 1.. {
            let token = call_token.clone().unwrap_or_else(|| self.new_value(opts));
            let give_up_at = started + opts.wait_budget();
            // The windows this attempt asks for follow the manager's round trip to Redis; a
            // grant that answers it lives the claim window sent here.
            let (claim, lease) = handoff.map_or((Duration::ZERO, Duration::ZERO), |h| h.windows());
            let queue = wake_channel.map(|channel| QueueTicket {
                channel,
                seq,
                claim,
                lease,
            });
            let attempt_start = Instant::now();
            probe.attempt();
            let attempt = self
                .attempt(&key, token, opts, queue, Some(give_up_at), attempt_start)
                .await;
            if let Some(handoff) = handoff {
                handoff.record_round_trip(attempt_start.elapsed());
            }
            let attempt = match attempt {
                Ok(attempt) => attempt,
                // The script never ran (its keys are split by a slot migration, or the cluster
                // is reconfiguring): wait it out within the budget, as for a held key.
                Err(err) if !opts.wait_budget().is_zero() && err.script_never_ran() => {
                    tracing::debug!(key, error = %err, "lock script refused during a cluster change; retrying within the wait budget");
                    Attempt::Held { holder_ttl: None }
                }
                Err(err) => return Err(err),
            };
            match attempt {
                Attempt::Acquired(guard) => {
                    if let Some(withdraw) = withdraw {
                        withdraw.disarm();
                    }
                    return Ok(guard);
                }
                Attempt::Held { holder_ttl } => {
                    probe.held(&key, holder_ttl);
                    let waited = started.elapsed();
                    let remaining = opts.wait_budget().saturating_sub(waited);
                    if remaining.is_zero() {
                        // A queued waiter's entry is withdrawn as `withdraw` drops.
                        return Err(LockError::Contended {
                            key: key.clone(),
                            waited,
                        });
                    }
                    let mut delay = match &waiter {
                        Some(_) => handoff::refresh_delay().min(opts.retry_cap_value()),
                        None => backoff.next_delay(),
                    }
                    .min(remaining);
                    if let Some(ttl) = holder_ttl {
                        // Wake no later than the holder's lease ends (+1 ms for the expiry).
                        delay = delay.min(ttl + Duration::from_millis(1));
                    }
                    match &waiter {
                        Some(waiter) => {
                            tokio::select! {
                                () = waiter.woken() => {}
                                () = tokio::time::sleep(delay) => {}
                            }
                            waiter.keep_listening();
                        }
                        None => tokio::time::sleep(delay).await,
                    }
                }
            }
            // A hand-over's grant answers this attempt only when it echoes its sequence number
            // (see `handoff`): an older one may have lapsed.
            let granted = match (&waiter, &call_token) {
                (Some(waiter), Some(value)) => waiter
                    .take_grant()
                    .filter(|grant| grant.seq == seq)
                    .and_then(|grant| self.granted(&key, value, opts, grant, attempt_start, claim)),
                _ => None,
            };
            if let Some(guard) = granted {
                probe.handed_over();
                if let Some(withdraw) = withdraw {
                    withdraw.disarm();
                }
                return Ok(guard);
            }
        }
        unreachable!("a u64 sequence of attempts does not run out")
    }

    /// The guard for a hand-over's grant that answers the queued attempt started at `start`,
    /// which asked for the claim window `claim`: the release set the key to the grant's stored
    /// value (the waiter's `value` with `acquired_at` stamped) with a TTL of the claim window
    /// (at most `opts`' ttl) after that attempt ran, so the lease is valid until `start` + the
    /// claim window − drift allowance; its first renewal sets the full ttl. `None` when that
    /// deadline has passed already (the wake-up came late) or the grant is unusable (a
    /// wake-up that only asks for a re-check, a fencing token of 0 from a counter lockcore did
    /// not mint, a value that is not this waiter's, or a manager that must confirm with
    /// `WAIT`): the waiter then re-checks.
    fn granted(
        &self,
        key: &str,
        value: &str,
        opts: &LockOptions,
        grant: Grant,
        start: Instant,
        claim: Duration,
    ) -> Option<LockGuard> {
        let counter_key =
            fencing::counter_key(&self.shared.key_prefix, key, self.shared.fencing_counter);
        let fenced = counter_key != key;
        let stored = grant.stored?;
        if !self.shared.backend.starts_on_grant()
            || (fenced && grant.fencing_token == 0)
            || crate::holder::token_of(&stored) != crate::holder::token_of(value)
        {
            return None;
        }
        let ttl = opts.ttl();
        let lease = Lease::handed_over(
            key.to_owned(),
            stored,
            grant.fencing_token,
            ttl,
            ttl.min(claim),
            start,
        )
        .with_key_template(opts.key_template_value());
        if Instant::now() >= lease.deadline() {
            return None;
        }
        Some(LockGuard::new(Arc::clone(&self.shared), lease, opts))
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
        let prefix = &self.shared.key_prefix;
        let probe = AcquireProbe::start(prefix, key, opts.key_template_value());
        probe.attempt();
        let result = self
            .try_acquire_once(key, opts)
            .instrument(probe.span())
            .await;
        probe.finish(&result.as_ref().map(Option::as_ref));
        result
    }

    async fn try_acquire_once(
        &self,
        key: &str,
        opts: &LockOptions,
    ) -> Result<Option<LockGuard>, LockError> {
        let key = self.checked_key(key, opts)?;
        match self
            .attempt(&key, self.new_value(opts), opts, None, None, Instant::now())
            .await?
        {
            Attempt::Acquired(guard) => Ok(Some(guard)),
            Attempt::Held { .. } => Ok(None),
        }
    }

    pub(crate) fn checked_key(&self, key: &str, opts: &LockOptions) -> Result<String, LockError> {
        let key = full_key(&self.shared.key_prefix, key)?;
        opts.validate()?;
        self.shared.backend.check_ttl(opts.ttl())?;
        Ok(key)
    }

    /// One acquire round. Cancel-safe: see [`Backend::attempt`](crate::backend::Backend).
    async fn attempt(
        &self,
        key: &str,
        token: String,
        opts: &LockOptions,
        queue: Option<QueueTicket<'_>>,
        give_up_at: Option<Instant>,
        attempt_start: Instant,
    ) -> Result<Attempt, LockError> {
        let ttl = opts.ttl();
        let counter_key =
            fencing::counter_key(&self.shared.key_prefix, key, self.shared.fencing_counter);
        let request = AttemptRequest {
            key,
            counter_key: &counter_key,
            token: &token,
            ttl,
            queue,
            give_up_at,
        };
        match self.shared.backend.attempt(&request, attempt_start).await? {
            Vote::Won {
                fencing_token,
                stored,
            } => {
                let value = stored.unwrap_or(token);
                let lease = Lease::new(key.to_owned(), value, fencing_token, ttl, attempt_start)
                    .with_key_template(opts.key_template_value());
                Ok(Attempt::Acquired(LockGuard::new(
                    Arc::clone(&self.shared),
                    lease,
                    opts,
                )))
            }
            Vote::Lost { holder_ttl } => Ok(Attempt::Held { holder_ttl }),
        }
    }

    /// How many leases of this manager the watchdog is renewing right now. Returns to zero once
    /// every watchdog guard is released, dropped or lost.
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
    pub(crate) fn data_nodes(&self) -> Vec<crate::node::Node> {
        self.shared.backend.nodes()
    }

    /// The state this manager shares with its guards.
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// A fresh lock value: a random 128-bit token (UUID v4) and the holder metadata.
    pub(crate) fn new_value(&self, opts: &LockOptions) -> String {
        self.shared.holder.mint(opts.key_template_value())
    }
}
