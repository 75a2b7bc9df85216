//! [`Node`]: one Redis endpoint the backend sends its scripts to.
//!
//! A node is a connection that routes and reconnects by itself; the backend (`single`,
//! `redlock`) only invokes scripts on it. It implements redis-rs'
//! [`ConnectionLike`](redis::aio::ConnectionLike), so `redis::Script::invoke_async` (EVALSHA with
//! the NOSCRIPT fallback) works the same on every kind.

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::io::tcp::TcpSettings;
use redis::{
    Client, Cmd, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, Pipeline, RedisFuture, Value,
};

use crate::LockError;
use crate::options::duration_ms;
use crate::redact::redact_url;
use crate::sentinel::SentinelPrimary;
use crate::tls::TlsFiles;

/// How the builder connects every node.
#[derive(Debug, Clone)]
pub(crate) struct ConnectOptions {
    pub(crate) connection_timeout: Duration,
    pub(crate) response_timeout: Duration,
    /// `TCP_NODELAY` on every connection (see `LockManagerBuilder::tcp_nodelay`).
    pub(crate) tcp_nodelay: bool,
    pub(crate) tls: TlsFiles,
}

impl ConnectOptions {
    /// The TCP settings of every connection lockcore opens (nodes, cluster nodes, sentinels
    /// and the primaries they resolve).
    pub(crate) fn tcp_settings(&self) -> TcpSettings {
        TcpSettings::default().set_nodelay(self.tcp_nodelay)
    }
}

/// How often the cluster client retries a command (MOVED, ASK, a lost connection) within the
/// response timeout; redis-rs' default of 16 with multi-second waits could block one call for
/// seconds.
const CLUSTER_RETRIES: u32 = 3;

/// One Redis endpoint.
#[derive(Clone)]
pub(crate) enum Node {
    /// One server over a redis-rs `ConnectionManager`: one multiplexed connection, re-made in
    /// the background after a failure.
    Plain(ConnectionManager),
    /// Redis Cluster over redis-rs' async cluster client: routes each script by its first key
    /// (every script's keys share the lock key's slot), follows MOVED and ASK, and refreshes
    /// its slot map after a fail-over.
    Cluster(ClusterConnection),
    /// The primary Sentinel names, re-resolved after a fail-over.
    Sentinel(SentinelPrimary),
}

impl Node {
    /// The connection info for `url`, with the builder's TCP settings.
    ///
    /// # Errors
    /// [`LockError::InvalidOptions`] for a malformed URL (the message shows the URL without
    /// its password), a `rediss://` URL without the `tls` feature, or one with `#insecure`.
    pub(crate) fn connection_info(
        url: &str,
        options: &ConnectOptions,
    ) -> Result<ConnectionInfo, LockError> {
        let info = url
            .into_connection_info()
            .map_err(|err| LockError::InvalidOptions {
                reason: format!(
                    "the Redis URL `{}` is malformed ({}); expected `redis://[user:password@]host:port/` or `rediss://...`",
                    redact_url(url),
                    err.detail().unwrap_or("bad URL"),
                ),
            })?
            .set_tcp_settings(options.tcp_settings());
        if let ConnectionAddr::TcpTls { insecure, .. } = info.addr() {
            // Whatever redis-rs features another crate turns on: certificates are always checked.
            if *insecure {
                return Err(LockError::InvalidOptions {
                    reason: format!(
                        "the URL `{}` asks for `#insecure`, which turns the server's certificate check off; lockcore always verifies it: remove the fragment, and trust a private CA with `tls_root_ca_pem`",
                        redact_url(url)
                    ),
                });
            }
            crate::tls::ensure_supported(url)?;
        }
        Ok(info)
    }

    /// [`connection_info`](Self::connection_info) of every URL.
    pub(crate) fn connection_infos(
        urls: &[String],
        options: &ConnectOptions,
    ) -> Result<Vec<ConnectionInfo>, LockError> {
        urls.iter()
            .map(|url| Self::connection_info(url, options))
            .collect()
    }

    /// The redis-rs client for `url` (see [`connection_info`](Self::connection_info)), trusting
    /// the builder's CA for `rediss://`.
    pub(crate) fn client(url: &str, options: &ConnectOptions) -> Result<Client, LockError> {
        let info = Self::connection_info(url, options)?;
        Ok(options.tls.client(info)?)
    }

    /// Connects to a Redis Cluster through its seed nodes now, with bounded retries: every
    /// call stays within about two response timeouts.
    pub(crate) async fn cluster(
        seeds: &[String],
        options: &ConnectOptions,
    ) -> Result<Node, LockError> {
        let infos = Self::connection_infos(seeds, options)?;
        let builder = redis::cluster::ClusterClientBuilder::new(infos)
            .tcp_settings(options.tcp_settings())
            .connection_timeout(options.connection_timeout)
            .response_timeout(options.response_timeout)
            .overall_response_timeout(Some(options.response_timeout * 2))
            .retries(CLUSTER_RETRIES)
            .min_retry_wait(10)
            .max_retry_wait(100);
        let client = options.tls.cluster(builder).build()?;
        let conn = client.get_async_connection().await?;
        Ok(Node::Cluster(conn))
    }

    /// Connects to one server now: an unreachable server fails here. The scripts are loaded
    /// into its cache, and an eviction policy that can drop the fencing counter is warned about.
    pub(crate) async fn connect(
        client: Client,
        options: &ConnectOptions,
    ) -> redis::RedisResult<Node> {
        let mut conn = ConnectionManager::new_with_config(client, manager_config(options)).await?;
        crate::scripts::preload_on(&mut conn).await?;
        warn_if_counter_can_be_evicted(&mut conn).await;
        Ok(Node::Plain(conn))
    }

    /// A node that connects on first use (and reconnects in the background), so that a
    /// Redlock manager can be built while some of its nodes are down.
    pub(crate) fn lazy(client: Client, options: &ConnectOptions) -> redis::RedisResult<Node> {
        ConnectionManager::new_lazy_with_config(client, manager_config(options)).map(Node::Plain)
    }

    /// The renewal script (compare-and-`PEXPIRE`) over `leases`, in one call (on a cluster,
    /// one call per slot, in parallel: a script's keys must share a slot). Entry `i` is
    /// `Some(true)` when lease `i` was renewed, `Some(false)` when its key is gone or not its
    /// own, `None` when its cluster shard did not answer while others did.
    ///
    /// # Errors
    /// When the one call fails (on a cluster: when every slot's call failed).
    pub(crate) async fn renew(
        self,
        leases: &[(&str, &str, Duration)],
    ) -> redis::RedisResult<Vec<Option<bool>>> {
        if !matches!(self, Node::Cluster(_)) {
            let renewed = renew_batch(self, leases.iter().copied()).await?;
            return Ok(renewed.into_iter().map(Some).collect());
        }
        let mut by_slot: std::collections::BTreeMap<u16, Vec<usize>> = Default::default();
        for (index, (key, _, _)) in leases.iter().enumerate() {
            by_slot
                .entry(crate::slot::key_hash_slot(key.as_bytes()))
                .or_default()
                .push(index);
        }
        let calls = by_slot.values().map(|indexes| {
            let node = self.clone();
            async move {
                let renewed = renew_batch(node, indexes.iter().map(|&i| leases[i])).await;
                (indexes, renewed)
            }
        });
        let mut out = vec![None; leases.len()];
        let mut first_error = None;
        let mut answered = false;
        for (indexes, renewed) in futures_util::future::join_all(calls).await {
            match renewed {
                Ok(renewed) => {
                    answered = true;
                    for (&index, ok) in indexes.iter().zip(renewed) {
                        out[index] = Some(ok);
                    }
                }
                Err(err) => {
                    first_error.get_or_insert(err);
                }
            }
        }
        match first_error {
            Some(err) if !answered => Err(err),
            _ => Ok(out),
        }
    }
}

/// One renewal script call over `leases`.
async fn renew_batch<'a>(
    mut node: Node,
    leases: impl Iterator<Item = (&'a str, &'a str, Duration)>,
) -> redis::RedisResult<Vec<bool>> {
    let leases: Vec<_> = leases.collect();
    let bytes = leases
        .iter()
        .map(|(key, token, _)| key.len() + token.len() + 8)
        .sum();
    let mut call = crate::scripts::Call::new(
        &crate::scripts::RENEW,
        leases.len(),
        3 * leases.len(),
        bytes,
    );
    for (key, _, _) in &leases {
        call.arg(*key);
    }
    for (_, token, ttl) in &leases {
        call.arg(*token).arg(duration_ms(*ttl));
    }
    let renewed: Vec<i64> = call.invoke(&mut node).await?;
    Ok(renewed.into_iter().map(|ok| ok == 1).collect())
}

/// The `ConnectionManager` settings every plain connection uses.
pub(crate) fn manager_config(options: &ConnectOptions) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(options.connection_timeout))
        .set_response_timeout(Some(options.response_timeout))
        .set_number_of_retries(1)
}

impl ConnectionLike for Node {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Node::Plain(conn) => conn.req_packed_command(cmd),
            Node::Cluster(conn) => conn.req_packed_command(cmd),
            Node::Sentinel(primary) => primary.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Node::Plain(conn) => conn.req_packed_commands(pipeline, offset, count),
            Node::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
            Node::Sentinel(primary) => primary.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Node::Plain(conn) => conn.get_db(),
            Node::Cluster(conn) => conn.get_db(),
            Node::Sentinel(primary) => primary.get_db(),
        }
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
