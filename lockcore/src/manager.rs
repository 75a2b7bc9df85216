//! [`LockManager`] and its builder: the connection, the key prefix and the acquire loop.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::io::tcp::TcpSettings;
use redis::{Client, IntoConnectionInfo};
use tokio::runtime::Handle;
use tokio::time::Instant;

use crate::fencing::{self, FencingCounter};
use crate::guard::LockGuard;
use crate::handoff::{self, Handoff};
use crate::key::{DEFAULT_KEY_PREFIX, full_key};
use crate::lease::{Lease, validity};
use crate::redlock::{Nodes, Vote};
use crate::release::PendingAcquire;
use crate::watchdog::{Registration, Watchdog};
use crate::{LockError, LockOptions};

/// A handle to one Redis node that hands out locks. Cheap to [`Clone`]: an `Arc` inside, and
/// every clone shares one connection.
///
/// # Behavior
/// - The connection is a redis-rs [`ConnectionManager`]: one multiplexed connection that
///   reconnects in the background after a failure. `TCP_NODELAY` is on (redis 1.x leaves it
///   off, which adds up to 40 ms to small requests).
/// - Commands time out after the builder's response timeout (default 500 ms) and connection
///   attempts after the connection timeout (default 1 s). A backend that is down therefore fails
///   an acquire with [`LockError::Redis`] within about one connection timeout (connection
///   refused) or two response timeouts (a server that does not answer: the attempt, then its
///   cleanup); it never turns into [`LockError::Contended`].
/// - Keys are the prefix (default `"lock:"`) followed by the caller's key, byte for byte.
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
    inner: Arc<Inner>,
}

struct Inner {
    nodes: Nodes,
    /// Waiter queue and wake-ups; single node only.
    handoff: Option<Arc<Handoff>>,
    key_prefix: String,
    default_options: LockOptions,
    fencing_counter: FencingCounter,
    /// Where releases of dropped guards are spawned when the dropping thread has no runtime,
    /// and where the watchdog runs.
    runtime: Handle,
    watchdog: Arc<Watchdog>,
}

impl std::fmt::Debug for LockManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockManager")
            .field("key_prefix", &self.inner.key_prefix)
            .field("default_options", &self.inner.default_options)
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
        &self.inner.key_prefix
    }

    /// The options used by `#[distributed_lock]` for what the attribute does not set.
    pub fn default_options(&self) -> &LockOptions {
        &self.inner.default_options
    }

    /// Acquires the lock on `key` (the manager's prefix is put in front), retrying with
    /// exponential backoff and full jitter until `opts`' wait budget is spent.
    ///
    /// Each attempt draws a fresh random 128-bit token (UUID v4) and sends
    /// `SET <prefix><key> <token> NX PX <ttl_ms>` (to every node, for Redlock); the fencing
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
        let started = Instant::now();
        let mut backoff = opts.backoff();
        // On one node the waiter queue knows a waiter by its token, so one token serves the
        // whole call; Redlock draws one per attempt, so that a late cleanup of a failed attempt
        // can never touch a later attempt's lock.
        let call_token = self.inner.handoff.as_ref().map(|_| new_token());
        // Register for wake-ups before the first attempt: the attempt that finds the key held
        // queues this waiter, so no release can slip between that check and the wait.
        let waiter = match (&self.inner.handoff, &call_token) {
            (Some(handoff), Some(token))
                if opts.handoff_enabled() && !opts.wait_budget().is_zero() =>
            {
                Some(handoff.register(self, &key, token, opts.ttl()))
            }
            _ => None,
        };
        let wake_channel = waiter
            .as_ref()
            .and(self.inner.handoff.as_deref())
            .map(Handoff::channel);
        loop {
            let token = call_token.clone().unwrap_or_else(new_token);
            match self.attempt(&key, token, opts, wake_channel).await? {
                Attempt::Acquired(guard) => {
                    if let Some(waiter) = waiter {
                        waiter.acquired();
                    }
                    return Ok(guard);
                }
                Attempt::Held { holder_ttl } => {
                    let waited = started.elapsed();
                    let remaining = opts.wait_budget().saturating_sub(waited);
                    if remaining.is_zero() {
                        // A queued waiter's entry is withdrawn as `waiter` drops.
                        return Err(LockError::Contended { key, waited });
                    }
                    let mut delay = match &waiter {
                        Some(_) => handoff::REFRESH.min(opts.retry_cap_value()),
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
        }
    }

    /// Makes exactly one attempt to acquire `key`.
    ///
    /// Returns `Ok(None)` when another holder has the key; `opts`' wait budget is ignored.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire), except that it never returns
    /// [`LockError::Contended`].
    pub async fn try_acquire(
        &self,
        key: &str,
        opts: &LockOptions,
    ) -> Result<Option<LockGuard>, LockError> {
        let key = self.checked_key(key, opts)?;
        match self.attempt(&key, new_token(), opts, None).await? {
            Attempt::Acquired(guard) => Ok(Some(guard)),
            Attempt::Held { .. } => Ok(None),
        }
    }

    fn checked_key(&self, key: &str, opts: &LockOptions) -> Result<String, LockError> {
        let key = full_key(&self.inner.key_prefix, key)?;
        opts.validate()?;
        Ok(key)
    }

    /// One acquire round. Cancel-safe: see [`PendingAcquire`].
    async fn attempt(
        &self,
        key: &str,
        token: String,
        opts: &LockOptions,
        wake_channel: Option<&str>,
    ) -> Result<Attempt, LockError> {
        let attempt_start = Instant::now();
        let ttl = opts.ttl();
        let pending = PendingAcquire::new(self, key, &token, ttl);
        let counter = fencing::counter_key(&self.inner.key_prefix, key, self.inner.fencing_counter);
        let vote = self
            .inner
            .nodes
            .acquire(key, &counter, &token, ttl, wake_channel)
            .await;
        let redlock_expired =
            self.inner.nodes.len() > 1 && attempt_start.elapsed() >= validity(ttl);
        match vote {
            Ok(Vote::Won { fencing_token }) if !redlock_expired => {
                pending.disarm();
                let lease = Lease::new(key.to_owned(), token, fencing_token, ttl, attempt_start);
                Ok(Attempt::Acquired(LockGuard::new(self.clone(), lease, opts)))
            }
            Ok(vote) => {
                let holder_ttl = match vote {
                    Vote::Lost { holder_ttl } => holder_ttl,
                    Vote::Won { .. } => None,
                };
                if self.inner.nodes.len() > 1 {
                    // Some nodes may hold this attempt's token: take it back from all of them.
                    // Errors are fine here: a node that cannot be reached expires it by TTL.
                    let _ = self.inner.nodes.release(key, &token, ttl).await;
                }
                pending.disarm();
                Ok(Attempt::Held { holder_ttl })
            }
            Err(err) => {
                // The SET may have been applied even though its reply was lost.
                if let Err(cleanup) = self.inner.nodes.release(key, &token, ttl).await {
                    tracing::warn!(key, error = %cleanup, "could not clean up after a failed acquire; retrying in the background");
                    self.spawn_release(key.to_owned(), token.clone(), ttl);
                }
                pending.disarm();
                Err(err)
            }
        }
    }

    /// How many leases of this manager the watchdog is renewing right now. Returns to zero once
    /// every watchdog guard is released, dropped or lost.
    pub fn live_renewals(&self) -> usize {
        self.inner.watchdog.live()
    }

    /// Starts the watchdog's renewal of `lease`.
    pub(crate) fn watch(&self, lease: Arc<Lease>, max_hold: Option<Duration>) -> Registration {
        self.inner
            .watchdog
            .register(lease, max_hold, &self.inner.nodes, &self.inner.runtime)
    }

    /// The nodes this manager locks on.
    pub(crate) fn nodes(&self) -> &Nodes {
        &self.inner.nodes
    }

    /// Spawns a bounded background compare-and-delete of `token` on `key`: on the current
    /// runtime if there is one, otherwise on the runtime the manager was built on. If neither
    /// accepts the task, the key is left to its TTL.
    pub(crate) fn spawn_release(&self, key: String, token: String, ttl: Duration) {
        let handle = Handle::try_current().unwrap_or_else(|_| self.inner.runtime.clone());
        let manager = self.clone();
        // A runtime that has shut down drops the task unrun; the notice says so when dropped.
        let notice = crate::release::LeftToTtl::new(key.clone());
        handle.spawn(async move {
            crate::release::release_with_retries(manager, key, token, ttl).await;
            notice.disarm();
        });
    }
}

/// A fresh random 128-bit token: a UUID v4 in its hyphenated form.
fn new_token() -> String {
    uuid::Uuid::new_v4().hyphenated().to_string()
}

/// Builds a [`LockManager`]. Give exactly one of [`url`](Self::url) (one Redis node) or
/// [`nodes`](Self::nodes) (Redlock over N independent masters); everything else is optional.
///
/// ```no_run
/// # async fn demo() -> Result<(), lockcore::LockError> {
/// use std::time::Duration;
/// use lockcore::{LockManager, LockOptions};
///
/// let locks = LockManager::builder()
///     .url("redis://127.0.0.1:6380/")
///     .key_prefix("shop:lock:")
///     .default_options(LockOptions::new(Duration::from_secs(10)))
///     .response_timeout(Duration::from_millis(250))
///     .build()
///     .await?;
///
/// // The same surface over five independent masters (Redlock):
/// let redlock = LockManager::builder()
///     .nodes([
///         "redis://10.0.0.1:6379/",
///         "redis://10.0.0.2:6379/",
///         "redis://10.0.0.3:6379/",
///         "redis://10.0.0.4:6379/",
///         "redis://10.0.0.5:6379/",
///     ])
///     .node_timeout(Duration::from_millis(50))
///     .build()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct LockManagerBuilder {
    urls: Vec<String>,
    key_prefix: String,
    default_options: LockOptions,
    fencing_counter: FencingCounter,
    connection_timeout: Duration,
    response_timeout: Duration,
    node_timeout: Option<Duration>,
}

impl Default for LockManagerBuilder {
    fn default() -> Self {
        LockManagerBuilder {
            urls: Vec::new(),
            key_prefix: DEFAULT_KEY_PREFIX.to_owned(),
            default_options: LockOptions::default(),
            fencing_counter: FencingCounter::default(),
            connection_timeout: Duration::from_secs(1),
            response_timeout: Duration::from_millis(500),
            node_timeout: None,
        }
    }
}

impl LockManagerBuilder {
    /// One Redis node, as a `redis://` or `rediss://` URL.
    pub fn url(mut self, url: impl Into<String>) -> Self {
        self.urls = vec![url.into()];
        self
    }

    /// Redlock over these independent masters (see "Redlock" in the crate docs):
    /// quorum N/2 + 1 of the configured N. Use 3 or 5 nodes; 2 tolerate no fault. A single URL
    /// here is the same as [`url`](Self::url).
    pub fn nodes<I, S>(mut self, urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.urls = urls.into_iter().map(|u| u.as_ref().to_owned()).collect();
        self
    }

    /// The prefix put before every key. Default `"lock:"`; may be empty.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// Options that `#[distributed_lock]` uses for whatever its arguments leave out.
    pub fn default_options(mut self, options: LockOptions) -> Self {
        self.default_options = options;
        self
    }

    /// Where the fencing counter lives: one per prefix (default) or one per Redis Cluster slot.
    /// See [`FencingCounter`].
    pub fn fencing_counter(mut self, counter: FencingCounter) -> Self {
        self.fencing_counter = counter;
        self
    }

    /// How long one connection attempt may take. Default 1 s.
    pub fn connection_timeout(mut self, timeout: Duration) -> Self {
        self.connection_timeout = timeout;
        self
    }

    /// How long one command may wait for its reply. Default 500 ms. A command that times out
    /// fails with [`LockError::Redis`]; an acquire then cleans up its token.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// Redlock only: how long each node may take to answer one request before it counts as a
    /// vote against. Default: ttl/10 of the lease at hand.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = Some(timeout);
        self
    }

    /// Connects and returns the manager.
    ///
    /// One node is connected at once, so an unreachable node fails here. Redlock nodes connect
    /// lazily (and reconnect in the background), so a manager can be built while some nodes
    /// are down; they count as votes against until they answer.
    ///
    /// # Errors
    /// - [`LockError::InvalidOptions`] when no URL was given or the default options are out of
    ///   range.
    /// - [`LockError::Redis`] when a URL is malformed or the single node cannot be reached.
    pub async fn build(self) -> Result<LockManager, LockError> {
        self.default_options.validate()?;
        if self.urls.is_empty() {
            return Err(LockError::InvalidOptions {
                reason: "no Redis URL given; call `.url(\"redis://host:port/\")` or `.nodes([..])` on the builder".to_owned(),
            });
        }
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.connection_timeout))
            .set_response_timeout(Some(self.response_timeout))
            .set_number_of_retries(1);
        let mut conns = Vec::with_capacity(self.urls.len());
        let mut handoff = None;
        for url in &self.urls {
            let info = url
                .as_str()
                .into_connection_info()?
                .set_tcp_settings(TcpSettings::default().set_nodelay(true));
            let client = Client::open(info)?;
            let conn = if self.urls.len() == 1 {
                handoff = Some(Arc::new(Handoff::new(client.clone())));
                let mut conn = ConnectionManager::new_with_config(client, config.clone()).await?;
                crate::scripts::preload(&mut conn).await?;
                warn_if_counter_can_be_evicted(&mut conn).await;
                conn
            } else {
                ConnectionManager::new_lazy_with_config(client, config.clone())?
            };
            conns.push(conn);
        }
        if let Some(handoff) = &handoff {
            // Subscribe now, so that the first contended waiter is already woken by a push.
            handoff.subscribe().await;
        }
        Ok(LockManager {
            inner: Arc::new(Inner {
                nodes: Nodes::new(conns, self.node_timeout),
                handoff,
                key_prefix: self.key_prefix,
                default_options: self.default_options,
                fencing_counter: self.fencing_counter,
                runtime: Handle::current(),
                watchdog: Arc::default(),
            }),
        })
    }
}

/// Logs a warning, once per process, when the node's `maxmemory-policy` may evict the fencing
/// counter (the `allkeys-*` policies). `CONFIG` may be disabled on managed Redis; then nothing is
/// checked.
async fn warn_if_counter_can_be_evicted(conn: &mut ConnectionManager) {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if WARNED.load(std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    let reply: redis::RedisResult<Vec<String>> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query_async(conn)
        .await;
    if let Ok(reply) = reply
        && let Some(policy) = reply.get(1)
        && policy.starts_with("allkeys-")
        && !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed)
    {
        tracing::warn!(
            policy,
            "maxmemory-policy may evict the fencing counter; fencing tokens are then no longer monotonic"
        );
    }
}
