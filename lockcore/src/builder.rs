//! [`LockManagerBuilder`]: connections, prefix, default options and timeouts.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::io::tcp::TcpSettings;
use redis::{Client, IntoConnectionInfo};

use crate::fencing::FencingCounter;
use crate::handoff::Handoff;
use crate::holder::HolderStamp;
use crate::key::DEFAULT_KEY_PREFIX;
use crate::redlock::Nodes;
use crate::{LockError, LockManager, LockOptions};

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
    process_label: Option<String>,
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
            process_label: None,
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
        Ok(LockManager::new(
            Nodes::new(conns, self.node_timeout, self.key_prefix.clone()),
            handoff,
            self.key_prefix,
            self.default_options,
            self.fencing_counter,
            HolderStamp::new(self.process_label.as_deref()),
        ))
    }

    /// A label for this process in the holder metadata of every lock it takes (for example the
    /// service and instance name, `"orders-7"`), shown by `lockctl` beside host and pid. Default:
    /// none. See [`holder`](crate::holder) for what the lock value holds.
    pub fn process_label(mut self, label: impl Into<String>) -> Self {
        self.process_label = Some(label.into());
        self
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
