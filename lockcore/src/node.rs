//! [`Node`]: one Redis endpoint the backend sends its scripts to.
//!
//! A node is a connection that routes and reconnects by itself; it runs no lock protocol (which
//! leases share a call is the backend's choice). It implements redis-rs' [`ConnectionLike`], so
//! a script call (EVALSHA with the NOSCRIPT fallback, see `scripts::Call`) works the same on
//! every kind.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::io::tcp::TcpSettings;
use redis::{
    Client, Cmd, ConnectionInfo, FromRedisValue, IntoConnectionInfo, Pipeline, RedisFuture, Value,
};

use crate::LockError;
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

/// Whether `url` names a TLS scheme (`rediss://` or `valkeys://`, in any case), the only ones
/// redis-rs connects to with TLS.
fn uses_tls(url: &str) -> bool {
    url.split_once("://").is_some_and(|(scheme, _)| {
        scheme.eq_ignore_ascii_case("rediss") || scheme.eq_ignore_ascii_case("valkeys")
    })
}

/// How often the cluster client retries a command (MOVED, ASK, a lost connection) within the
/// response timeout; redis-rs' default of 16 with multi-second waits could block one call for
/// seconds.
const CLUSTER_RETRIES: u32 = 3;

/// One Redis endpoint, and the name its errors carry.
#[derive(Clone)]
pub(crate) struct Node {
    conn: Conn,
    /// Where the node is, for error messages: an address, never a password.
    name: Arc<str>,
}

/// The connection of a [`Node`].
#[derive(Clone)]
enum Conn {
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

/// `error` with the node it came from named in its message, its kind (and, for an I/O error,
/// its `std::io::ErrorKind`) kept, so that its predicates (`kind`, `code`, `is_timeout`,
/// `is_connection_dropped`, ...) still hold.
fn from_node(error: redis::RedisError, node: &str) -> redis::RedisError {
    let io = std::error::Error::source(&error).and_then(|s| s.downcast_ref::<std::io::Error>());
    if let Some(io) = io {
        return std::io::Error::new(io.kind(), format!("{io} (node {node})")).into();
    }
    redis::RedisError::from((
        error.kind(),
        "error from a lock node",
        format!("{error} (node {node})"),
    ))
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
        // Before redis-rs parses it: without its TLS feature, redis-rs refuses a TLS URL as
        // if it were malformed.
        if uses_tls(url) {
            crate::tls::ensure_supported(url)?;
        }
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
        if let redis::ConnectionAddr::TcpTls { insecure, .. } = info.addr() {
            // Whatever redis-rs features another crate turns on: certificates are always checked.
            if *insecure {
                return Err(LockError::InvalidOptions {
                    reason: format!(
                        "the URL `{}` asks for `#insecure`, which turns the server's certificate check off; lockcore always verifies it: remove the fragment, and trust a private CA with `tls_root_ca_pem`",
                        redact_url(url)
                    ),
                });
            }
        }
        Ok(info)
    }

    /// Accepts an application's own client: certificates must be checked (no `#insecure`),
    /// and a TLS address needs the `tls` feature (which also installs the crypto provider).
    ///
    /// # Errors
    /// [`LockError::InvalidOptions`], naming the address (never a password).
    pub(crate) fn check_client(client: &Client) -> Result<(), LockError> {
        if let redis::ConnectionAddr::TcpTls { insecure, .. } = client.get_connection_info().addr()
        {
            let addr = client.get_connection_info().addr().to_string();
            if *insecure {
                return Err(LockError::InvalidOptions {
                    reason: format!(
                        "the client for `{addr}` turns the server's certificate check off (`#insecure`); lockcore always verifies it: build the client without it, and trust a private CA in its TLS settings"
                    ),
                });
            }
            crate::tls::ensure_supported(&format!("rediss://{addr}"))?;
        }
        Ok(())
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
        let name: Arc<str> = format!(
            "Redis Cluster, seeds {}",
            infos
                .iter()
                .map(|info| info.addr().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )
        .into();
        let builder = redis::cluster::ClusterClientBuilder::new(infos)
            .tcp_settings(options.tcp_settings())
            .connection_timeout(options.connection_timeout)
            .response_timeout(options.response_timeout)
            .overall_response_timeout(Some(options.response_timeout * 2))
            .retries(CLUSTER_RETRIES)
            .min_retry_wait(10)
            .max_retry_wait(100);
        let client = options.tls.cluster(builder).build()?;
        let conn = client
            .get_async_connection()
            .await
            .map_err(|e| from_node(e, &name))?;
        Ok(Node {
            conn: Conn::Cluster(conn),
            name,
        })
    }

    /// The primary Sentinel resolves, as a node.
    pub(crate) fn sentinel(primary: SentinelPrimary, master_name: &str) -> Node {
        Node {
            conn: Conn::Sentinel(primary),
            name: format!("primary `{master_name}` through Sentinel").into(),
        }
    }

    /// The address of `client`, as its errors name it.
    fn name_of(client: &Client) -> Arc<str> {
        client.get_connection_info().addr().to_string().into()
    }

    /// Whether this is a Redis Cluster (a script's keys must share a slot; a command may be
    /// sent twice).
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.conn, Conn::Cluster(_))
    }

    /// The cluster connection, on a Redis Cluster.
    pub(crate) fn as_cluster(&self) -> Option<&ClusterConnection> {
        match &self.conn {
            Conn::Cluster(conn) => Some(conn),
            _ => None,
        }
    }

    /// The Sentinel-resolved primary, under Sentinel.
    pub(crate) fn as_sentinel(&self) -> Option<&SentinelPrimary> {
        match &self.conn {
            Conn::Sentinel(primary) => Some(primary),
            _ => None,
        }
    }

    /// `error` (from a call on this node) with this node named in its message.
    pub(crate) fn name_error(&self, error: redis::RedisError) -> redis::RedisError {
        from_node(error, &self.name)
    }

    /// Connects to one server now: an unreachable server fails here. The scripts are loaded
    /// into its cache, and an eviction policy that can drop the fencing counter is warned about.
    pub(crate) async fn connect(
        client: Client,
        options: &ConnectOptions,
    ) -> redis::RedisResult<Node> {
        let name = Self::name_of(&client);
        let connected = async {
            let mut conn =
                ConnectionManager::new_with_config(client, manager_config(options)).await?;
            crate::scripts::preload_on(&mut conn).await?;
            warn_if_counter_can_be_evicted(&mut conn).await;
            redis::RedisResult::Ok(conn)
        };
        match connected.await {
            Ok(conn) => Ok(Node {
                conn: Conn::Plain(conn),
                name,
            }),
            Err(error) => Err(from_node(error, &name)),
        }
    }

    /// A node that connects on first use (and reconnects in the background), so that a
    /// Redlock manager can be built while some of its nodes are down.
    pub(crate) fn lazy(client: Client, options: &ConnectOptions) -> redis::RedisResult<Node> {
        let name = Self::name_of(&client);
        let conn = ConnectionManager::new_lazy_with_config(client, manager_config(options))?;
        Ok(Node {
            conn: Conn::Plain(conn),
            name,
        })
    }

    /// Runs `cmd` on the one server that serves `key`: on a cluster the primary of the key's
    /// slot, for a command the cluster client would otherwise send to every node (such as
    /// `SCRIPT LOAD`, whose reply would then wait for the slowest shard); otherwise this node.
    pub(crate) async fn query_for_key<T: FromRedisValue>(
        &mut self,
        key: &[u8],
        cmd: Cmd,
    ) -> redis::RedisResult<T> {
        match &mut self.conn {
            Conn::Cluster(conn) => {
                let route = Route::with_key(key, SlotAddr::Master);
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
                let value = conn
                    .route_command(cmd, routing)
                    .await
                    .map_err(|e| from_node(e, &self.name))?;
                Ok(T::from_redis_value(value)?)
            }
            Conn::Plain(_) | Conn::Sentinel(_) => cmd.query_async(self).await,
        }
    }
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
        Box::pin(async move {
            let reply = match &mut self.conn {
                Conn::Plain(conn) => conn.req_packed_command(cmd).await,
                Conn::Cluster(conn) => conn.req_packed_command(cmd).await,
                Conn::Sentinel(primary) => primary.req_packed_command(cmd).await,
            };
            match reply {
                // A server's error reply to the command itself (a pipeline's stay values).
                Ok(Value::ServerError(error)) => Err(from_node(error.into(), &self.name)),
                Ok(value) => Ok(value),
                Err(error) => Err(from_node(error, &self.name)),
            }
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let replies = match &mut self.conn {
                Conn::Plain(conn) => conn.req_packed_commands(pipeline, offset, count).await,
                Conn::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count).await,
                Conn::Sentinel(primary) => {
                    primary.req_packed_commands(pipeline, offset, count).await
                }
            };
            replies.map_err(|e| from_node(e, &self.name))
        })
    }

    fn get_db(&self) -> i64 {
        match &self.conn {
            Conn::Plain(conn) => conn.get_db(),
            Conn::Cluster(conn) => conn.get_db(),
            Conn::Sentinel(primary) => primary.get_db(),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> ConnectOptions {
        ConnectOptions {
            connection_timeout: Duration::from_secs(1),
            response_timeout: Duration::from_secs(1),
            tcp_nodelay: true,
            tls: TlsFiles::default(),
        }
    }

    /// Without the `tls` feature a TLS URL is refused with the fix (the feature to enable),
    /// whatever redis-rs would say of it, and without its password.
    #[cfg(not(feature = "tls"))]
    #[test]
    fn a_tls_url_without_the_feature_names_the_feature() {
        for url in [
            "rediss://127.0.0.1:7391/",
            "REDISS://127.0.0.1:7391/",
            "valkeys://app:s3cret@127.0.0.1:7391/",
            "rediss://127.0.0.1:7391/#insecure",
        ] {
            let Err(LockError::InvalidOptions { reason }) = Node::connection_info(url, &options())
            else {
                panic!("{url}: expected InvalidOptions");
            };
            assert!(
                reason.contains("enable lockcore's cargo feature `tls`"),
                "{url}: {reason}"
            );
            assert!(!reason.contains("malformed"), "{url}: {reason}");
            assert!(!reason.contains("s3cret"), "{url}: {reason}");
        }
    }

    /// `LockManager::connect` reaches the same message, before any network call.
    #[cfg(not(feature = "tls"))]
    #[tokio::test]
    async fn connect_with_a_tls_url_without_the_feature_names_the_feature() {
        let err = crate::LockManager::connect("rediss://127.0.0.1:7391/")
            .await
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("enable lockcore's cargo feature `tls`"),
            "{err}"
        );
    }

    /// The twin: with the feature the same URLs are accepted as TLS addresses.
    #[cfg(feature = "tls")]
    #[test]
    fn a_tls_url_with_the_feature_is_a_tls_address() {
        for url in [
            "rediss://127.0.0.1:7391/",
            "valkeys://app:s3cret@127.0.0.1:7391/",
        ] {
            let info =
                Node::connection_info(url, &options()).unwrap_or_else(|e| panic!("{url}: {e}"));
            assert!(
                matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. }),
                "{url}"
            );
        }
    }

    /// A malformed URL is still called malformed, and a plain one passes.
    #[test]
    fn other_urls_are_unchanged() {
        let Err(LockError::InvalidOptions { reason }) =
            Node::connection_info("http://127.0.0.1:7391/", &options())
        else {
            panic!("expected InvalidOptions");
        };
        assert!(reason.contains("malformed"), "{reason}");
        assert!(Node::connection_info("redis://127.0.0.1:7391/", &options()).is_ok());
    }
}
