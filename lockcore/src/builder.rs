//! [`LockManagerBuilder`]: connections, prefix, default options and timeouts.

use std::sync::Arc;
use std::time::Duration;

use crate::backend::replicas::WaitForReplicas;
use crate::backend::topology::{Settings, Topology};
use crate::error::LockError;
use crate::manager::LockManager;
use crate::options::LockOptions;
use crate::protocol::fencing::FencingCounter;
use crate::protocol::keyspace::DEFAULT_KEY_PREFIX;
use crate::protocol::value::HolderStamp;
use crate::shared::Shared;
use crate::transport::connect::ConnectOptions;
use crate::transport::tls::TlsFiles;

/// Builds a [`LockManager`]. Give one topology: [`url`](Self::url) (one Redis node),
/// [`nodes`](Self::nodes) (Redlock over N independent masters), [`cluster`](Self::cluster)
/// (Redis Cluster) or [`sentinel`](Self::sentinel) (a primary found through Sentinel); the last
/// one called wins. Everything else is optional. Every URL may be `redis://` or (feature `tls`)
/// `rediss://`, with an ACL user: `rediss://user:password@host:port/`. `Debug` shows URLs with
/// the password masked.
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
#[derive(Clone)]
#[must_use]
pub struct LockManagerBuilder {
    topology: Topology,
    key_prefix: String,
    default_options: LockOptions,
    /// `None`: per prefix, or per slot on a cluster.
    fencing_counter: Option<FencingCounter>,
    connection_timeout: Duration,
    response_timeout: Duration,
    tcp_nodelay: bool,
    node_timeout: Option<Duration>,
    process_label: Option<String>,
    replicas: Option<WaitForReplicas>,
    tls: TlsFiles,
}

impl std::fmt::Debug for LockManagerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let topology = self.topology.describe();
        f.debug_struct("LockManagerBuilder")
            .field("topology", &topology)
            .field("key_prefix", &self.key_prefix)
            .field("default_options", &self.default_options)
            .field("fencing_counter", &self.fencing_counter)
            .field("connection_timeout", &self.connection_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("node_timeout", &self.node_timeout)
            .field("wait_for_replicas", &self.replicas)
            .field("tls", &self.tls)
            .field("process_label", &self.process_label)
            .finish()
    }
}

impl Default for LockManagerBuilder {
    fn default() -> Self {
        LockManagerBuilder {
            topology: Topology::Unset,
            key_prefix: DEFAULT_KEY_PREFIX.to_owned(),
            default_options: LockOptions::default(),
            fencing_counter: None,
            connection_timeout: Duration::from_secs(1),
            response_timeout: Duration::from_millis(500),
            tcp_nodelay: false,
            node_timeout: None,
            replicas: None,
            tls: TlsFiles::default(),
            process_label: None,
        }
    }
}

fn owned<I, S>(urls: I) -> Vec<String>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    urls.into_iter().map(|u| u.as_ref().to_owned()).collect()
}

impl LockManager {
    /// Connects to one Redis node with the default options (prefix `"lock:"`, ttl 30 s,
    /// wait 5 s). Same as `LockManager::builder().url(url).build().await`.
    ///
    /// # Errors
    /// [`LockError::InvalidOptions`] when the URL is malformed (the message shows it without
    /// its password), is `rediss://` without the `tls` feature, or asks for `#insecure`, before
    /// any network call; [`LockError::Redis`] when the node cannot be reached within the
    /// connection timeout (1 s by default).
    pub async fn connect(url: &str) -> Result<LockManager, LockError> {
        LockManager::builder().url(url).build().await
    }

    /// A builder for a manager with a custom prefix, default options or timeouts.
    pub fn builder() -> LockManagerBuilder {
        LockManagerBuilder::default()
    }
}

impl LockManagerBuilder {
    /// One Redis node, as a `redis://` or `rediss://` URL.
    pub fn url(mut self, url: impl Into<String>) -> Self {
        self.topology = Topology::Nodes(vec![url.into()]);
        self
    }

    /// One Redis node, through a `redis::Client` the application already has (built from its
    /// configuration, with its own TLS settings and credentials), instead of a URL. The
    /// client's connection settings are used as they are; the builder's timeouts, prefix and
    /// options apply as for [`url`](Self::url), and [`tls_root_ca_pem`](Self::tls_root_ca_pem)
    /// does not (configure TLS on the client). [`build`](Self::build) refuses a client whose
    /// address turns certificate checks off (`rediss://..#insecure`) with
    /// [`LockError::InvalidOptions`].
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = redis::Client::open("redis://127.0.0.1:6380/")?;
    /// let locks = lockcore::LockManager::builder().client(client.clone()).build().await?;
    /// # let _ = locks; Ok(()) }
    /// ```
    pub fn client(mut self, client: redis::Client) -> Self {
        self.topology = Topology::Client(client);
        self
    }

    /// Redlock over these independent masters (see "Redlock" in the guide,
    /// `docs/src/redlock.md`): quorum N/2 + 1 of the configured N. Use 3 or 5 nodes; 2
    /// tolerate no fault. A single URL here is the same as [`url`](Self::url).
    pub fn nodes<I, S>(mut self, urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.topology = Topology::Nodes(owned(urls));
        self
    }

    /// Redis Cluster, reached through these seed nodes (any reachable subset of the cluster;
    /// the client discovers the rest and follows MOVED, ASK and fail-overs). Every feature of a
    /// single node works: hand-off, fencing (one counter per slot, chosen automatically), the
    /// watchdog (one renewal call per slot) and [`wait_for_replicas`](Self::wait_for_replicas).
    /// See "Topologies" in the guide (`docs/src/topologies.md`) for what a fail-over can lose.
    pub fn cluster<I, S>(mut self, seed_urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.topology = Topology::Cluster(owned(seed_urls));
        self
    }

    /// A primary found through Redis Sentinel: `sentinel_urls` are the sentinels' addresses,
    /// `master_name` the name they monitor it under. The first URL's scheme (`redis://` or
    /// `rediss://`) and its ACL user and password, if any, serve every sentinel and the
    /// primary; [`build`](Self::build) refuses URLs that mix schemes or name other credentials
    /// than the first ([`LockError::InvalidOptions`]). The primary is resolved when the manager
    /// is built, and again when a command fails with `READONLY` or a dropped connection, or
    /// when a sentinel announces `+switch-master`. See "Topologies" in the guide
    /// (`docs/src/topologies.md`).
    pub fn sentinel<I, S>(mut self, sentinel_urls: I, master_name: &str) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.topology = Topology::Sentinel {
            sentinels: owned(sentinel_urls),
            master_name: master_name.to_owned(),
        };
        self
    }

    /// After each acquire and extend, `WAIT replicas timeout`: the call succeeds only once
    /// `replicas` replicas acknowledged the write. Too few acknowledgements within `timeout`
    /// release the key (acquire) and return [`LockError::NotReplicated`]. Narrows the window in
    /// which a fail-over to a replica that missed the write grants the lock twice; it does not
    /// close it (Redis replication stays asynchronous). The `WAIT` is sent in one pipeline with
    /// the script it covers, on one connection (on a cluster, to the primary of the key's
    /// slot): `WAIT` counts only the writes of the connection that sends it, so a connection
    /// swapped in between (a Sentinel fail-over, a reconnect) cannot answer for a write it did
    /// not make. No extra round trip, but every acquire attempt carries the `WAIT`, also one
    /// that finds the key held (it returns at once while the replicas keep up), and the `WAIT`
    /// holds the manager's connection meanwhile: other lock calls of this manager queue behind
    /// it. `timeout` must be above zero and below the
    /// [`response_timeout`](Self::response_timeout); [`build`](Self::build) refuses it otherwise
    /// ([`LockError::InvalidOptions`]). An extend that too few replicas acknowledge keeps the
    /// new TTL (Redis applied it) and returns [`LockError::NotReplicated`].
    pub fn wait_for_replicas(mut self, replicas: usize, timeout: Duration) -> Self {
        self.replicas = Some(WaitForReplicas { replicas, timeout });
        self
    }

    /// Trusts this CA (PEM) for `rediss://` connections, instead of the system's roots: only
    /// certificates it signed are accepted. For private CAs (managed services, tests).
    /// [`build`](Self::build) refuses PEM that holds no certificate, or one that does not parse
    /// ([`LockError::InvalidOptions`]).
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_root_ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls.root_ca_pem = Some(pem.into());
        self
    }

    /// Presents this client certificate and key (PEM) on `rediss://` connections (mTLS, for a
    /// server with `tls-auth-clients yes`). [`build`](Self::build) refuses a certificate PEM
    /// without a valid certificate, or a key PEM without a private key
    /// ([`LockError::InvalidOptions`]).
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_client_cert_pem(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.tls.client_cert_pem = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// The prefix put before every key. Default `"lock:"`; may be empty. It may not hold a
    /// segment reserved for lockcore's own keys (`__fencing_counter__`, `__waitq__`, `__shares__`,
    /// `__waiters__`, `__idem__`, `__wake__`): [`build`](Self::build) refuses it
    /// ([`LockError::InvalidOptions`]).
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// Options that `#[distributed_lock]` uses for whatever its arguments leave out.
    pub fn default_options(mut self, options: LockOptions) -> Self {
        self.default_options = options;
        self
    }

    /// Where the fencing counter lives: one per prefix (the default, except on a cluster) or one
    /// per Redis Cluster slot (the default on a cluster). See [`FencingCounter`].
    pub fn fencing_counter(mut self, counter: FencingCounter) -> Self {
        self.fencing_counter = Some(counter);
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

    /// `TCP_NODELAY` on every connection. Default `false`: Nagle's algorithm coalesces the
    /// requests of concurrent tasks on the shared connection, which the benchmark measured
    /// faster at 64 tasks and the same at 1 task (see "Benchmarks" in the guide). A request is
    /// held back only while an earlier one is unacknowledged, so turn it on when single
    /// commands exceed one TCP segment (keys or batches of many KiB on a real network), where
    /// the last segment can wait for a delayed ACK (up to 40 ms on Linux).
    pub fn tcp_nodelay(mut self, nodelay: bool) -> Self {
        self.tcp_nodelay = nodelay;
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
    /// One node, a cluster and a Sentinel-resolved primary are connected at once, so an
    /// unreachable one fails here. Redlock nodes connect lazily (and reconnect in the
    /// background), so a manager can be built while some nodes are down; they count as votes
    /// against until they answer.
    ///
    /// # Errors
    /// - [`LockError::InvalidOptions`] when no URL was given, the key prefix holds a reserved
    ///   segment, the TLS PEM material holds no usable certificate or key, a URL is malformed
    ///   (shown without its password) or asks for `#insecure`, Sentinel URLs mix schemes or
    ///   credentials, a `rediss://` URL is given without the `tls` feature, the default options
    ///   are out of range, or a per-prefix fencing counter is asked for on a cluster.
    /// - [`LockError::Redis`] when the node, cluster or sentinels cannot be reached, or no
    ///   sentinel knows `master_name`.
    pub async fn build(self) -> Result<LockManager, LockError> {
        crate::protocol::keyspace::check_prefix(&self.key_prefix)?;
        self.tls.check()?;
        self.default_options.validate()?;
        if let Some(replicas) = &self.replicas
            && (replicas.timeout.is_zero() || replicas.timeout >= self.response_timeout)
        {
            // `WAIT` blocks the manager's one multiplexed connection: 0 (forever) or a timeout
            // past the response timeout would turn every lock call into a Redis timeout.
            return Err(LockError::InvalidOptions {
                reason: format!(
                    "wait_for_replicas timeout is {}; expected more than zero and less than the response timeout ({})",
                    crate::util::time::Shown(replicas.timeout),
                    crate::util::time::Shown(self.response_timeout)
                ),
            });
        }
        // Everything a first acquire would otherwise build: the auxiliary keys' slot tags.
        crate::transport::slot::prepare();
        let settings = Settings {
            key_prefix: self.key_prefix.clone(),
            fencing_counter: self.fencing_counter,
            node_timeout: self.node_timeout,
            replicas: self.replicas,
            connect: ConnectOptions {
                connection_timeout: self.connection_timeout,
                response_timeout: self.response_timeout,
                tcp_nodelay: self.tcp_nodelay,
                tls: self.tls.clone(),
            },
        };
        let (backend, fencing_counter) = self.topology.open(&settings).await?;
        Ok(LockManager::new(Shared {
            backend,
            key_prefix: self.key_prefix,
            default_options: self.default_options,
            fencing_counter,
            watchdog: Arc::default(),
            holder: HolderStamp::new(self.process_label.as_deref()),
            live: Arc::default(),
        }))
    }

    /// A label for this process in the holder metadata of every lock it takes (for example the
    /// service and instance name, `"orders-7"`), shown by `lockctl` beside host and pid. Default:
    /// none. See [`keyspace`](crate::keyspace) for what the lock value holds.
    pub fn process_label(mut self, label: impl Into<String>) -> Self {
        self.process_label = Some(label.into());
        self
    }
}

#[cfg(all(test, not(feature = "tls")))]
mod tests {
    use super::*;

    /// `LockManager::connect` reaches the same message, before any network call.
    #[tokio::test]
    async fn connect_with_a_tls_url_without_the_feature_names_the_feature() {
        let err = LockManager::connect("rediss://127.0.0.1:7391/")
            .await
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("enable lockcore's cargo feature `tls`"),
            "{err}"
        );
    }
}
