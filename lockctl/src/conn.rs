//! Connections: one node (`--url`), a Sentinel-resolved primary (`--sentinel`) or a Redis
//! Cluster (`--cluster`), behind one [`Target`] that runs commands and scans every primary.

use std::time::Duration;

use lockcore::redact_url;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{Cmd, IntoConnectionInfo, Pipeline, RedisFuture, Value};

use crate::cli::{Connect, URL_VARS};
use crate::error::CtlError;

/// How long connecting, and each command, may take.
const TIMEOUT: Duration = Duration::from_secs(2);

/// SCAN's `COUNT` hint.
const SCAN_COUNT: usize = 500;

/// A connected deployment.
pub(crate) enum Target {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl Target {
    /// Connects as the arguments say.
    ///
    /// # Errors
    /// [`CtlError::BadInput`] for a malformed URL, [`CtlError::Unreachable`] when no connection
    /// could be made within the timeout.
    pub(crate) async fn connect(args: &Connect) -> Result<Target, CtlError> {
        install_crypto_provider();
        let certs = tls_certificates(args)?;
        if let Some(url) = &args.url {
            let what = url_what(args.url_from);
            let info = parse_url(what, url)?;
            let client = match certs {
                Some(certs) => redis::Client::build_with_tls(info, certs),
                None => redis::Client::open(info),
            }
            .map_err(|e| bad_url(what, url, &e))?;
            let config = redis::AsyncConnectionConfig::new()
                .set_connection_timeout(Some(TIMEOUT))
                .set_response_timeout(Some(TIMEOUT));
            let conn = client
                .get_multiplexed_async_connection_with_config(&config)
                .await
                .map_err(|e| CtlError::Unreachable {
                    target: format!("{}{}", redact_url(url), from_note(args.url_from)),
                    reason: e.to_string(),
                })?;
            return Ok(Target::Single(conn));
        }
        if !args.cluster.is_empty() {
            for url in &args.cluster {
                parse_url("URL", url)?;
            }
            let seeds = args.cluster.join(", ");
            let mut builder = redis::cluster::ClusterClient::builder(args.cluster.clone());
            if let Some(certs) = certs {
                builder = builder.certs(certs);
            }
            let client = builder
                .connection_timeout(TIMEOUT)
                .response_timeout(TIMEOUT)
                .retries(1)
                .build()
                .map_err(|e| bad_url("URL", &seeds, &e))?;
            let conn =
                within_timeout(redact_all(&args.cluster), client.get_async_connection()).await?;
            return Ok(Target::Cluster(conn));
        }
        if args.sentinel.is_empty() {
            return Err(CtlError::BadInput {
                what: "command line",
                value: "no server given".to_owned(),
                reason: format!(
                    "expected one of `--url URL`, `--cluster URL` or `--sentinel URL --master NAME`, or a URL in `{}` or `{}`",
                    URL_VARS[0], URL_VARS[1]
                ),
            });
        }
        let master = args.master.as_deref().unwrap_or_default();
        let mut node_info = redis::sentinel::SentinelNodeConnectionInfo::default();
        let infos = args
            .sentinel
            .iter()
            .map(|url| parse_url("URL", url))
            .collect::<Result<Vec<_>, _>>()?;
        if infos.iter().any(is_tls) != infos.iter().all(is_tls) {
            return Err(CtlError::BadInput {
                what: "--sentinel URLs",
                value: redact_all(&args.sentinel),
                reason: "they mix `redis://` and `rediss://`; expected one scheme for all (the first URL's scheme and credentials serve every sentinel and the primary)".to_owned(),
            });
        }
        if let Some(info) = infos.first() {
            // The first Sentinel URL's credentials and TLS mode are used for the primary too.
            node_info = node_info.set_redis_connection_info(info.redis_settings().clone());
            if is_tls(info) {
                node_info = node_info.set_tls_mode(redis::TlsMode::Secure);
            }
        }
        let mut client = redis::sentinel::SentinelClient::build(
            args.sentinel.clone(),
            master,
            Some(node_info),
            redis::sentinel::SentinelServerType::Master,
        )
        .map_err(|e| bad_url("URL", &args.sentinel.join(", "), &e))?;
        let target = format!(
            "master `{master}` through sentinel {}",
            redact_all(&args.sentinel)
        );
        let conn = within_timeout(target, client.get_async_connection()).await?;
        Ok(Target::Single(conn))
    }

    /// Every key matching `pattern`, of any type, with `SCAN` (on every primary of a cluster),
    /// as the bytes Redis holds (a key need not be UTF-8). Sorted, duplicates removed.
    pub(crate) async fn scan_keys(&mut self, pattern: &str) -> Result<Vec<Vec<u8>>, CtlError> {
        let mut keys = Vec::new();
        match self {
            Target::Single(conn) => scan_node(conn, None, pattern, &mut keys).await?,
            Target::Cluster(conn) => {
                for (host, port) in primaries(conn).await? {
                    scan_node(conn, Some((host, port)), pattern, &mut keys).await?;
                }
            }
        }
        keys.sort();
        keys.dedup();
        Ok(keys)
    }
}

/// One node's `SCAN` loop; `node` routes it on a cluster.
async fn scan_node<C: ClusterRoute>(
    conn: &mut C,
    node: Option<(String, u16)>,
    pattern: &str,
    keys: &mut Vec<Vec<u8>>,
) -> Result<(), CtlError> {
    let mut cursor: u64 = 0;
    loop {
        let mut cmd = redis::cmd("SCAN");
        cmd.arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(SCAN_COUNT);
        let (next, batch): (u64, Vec<Vec<u8>>) = conn.route(cmd, node.clone()).await?;
        keys.extend(batch);
        if next == 0 {
            return Ok(());
        }
        cursor = next;
    }
}

/// Sends a command to one node of a cluster (or, on one node, just sends it).
trait ClusterRoute {
    async fn route<T: redis::FromRedisValue>(
        &mut self,
        cmd: Cmd,
        node: Option<(String, u16)>,
    ) -> redis::RedisResult<T>;
}

impl ClusterRoute for MultiplexedConnection {
    async fn route<T: redis::FromRedisValue>(
        &mut self,
        cmd: Cmd,
        _node: Option<(String, u16)>,
    ) -> redis::RedisResult<T> {
        cmd.query_async(self).await
    }
}

impl ClusterRoute for ClusterConnection {
    async fn route<T: redis::FromRedisValue>(
        &mut self,
        cmd: Cmd,
        node: Option<(String, u16)>,
    ) -> redis::RedisResult<T> {
        let routing = match node {
            Some((host, port)) => SingleNodeRoutingInfo::ByAddress { host, port },
            None => SingleNodeRoutingInfo::Random,
        };
        let value = self
            .route_command(cmd, RoutingInfo::SingleNode(routing))
            .await?;
        redis::FromRedisValue::from_redis_value(value).map_err(Into::into)
    }
}

/// The primaries of a cluster, from `CLUSTER NODES` (flags `master`, not `fail`).
async fn primaries(conn: &mut ClusterConnection) -> Result<Vec<(String, u16)>, CtlError> {
    let mut cmd = redis::cmd("CLUSTER");
    cmd.arg("NODES");
    let nodes: String = conn.route(cmd, None).await?;
    Ok(parse_primaries(&nodes))
}

/// `CLUSTER NODES` lines: `<id> <ip:port@cport[,hostname]> <flags> ...`.
fn parse_primaries(nodes: &str) -> Vec<(String, u16)> {
    nodes
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let addr = fields.nth(1)?;
            let flags = fields.next()?;
            let flags: Vec<&str> = flags.split(',').collect();
            if !flags.contains(&"master") || flags.iter().any(|f| f.starts_with("fail")) {
                return None;
            }
            let addr = addr.split(['@', ',']).next()?;
            let (host, port) = addr.rsplit_once(':')?;
            Some((host.to_owned(), port.parse().ok()?))
        })
        .collect()
}

impl ConnectionLike for Target {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Target::Single(conn) => conn.req_packed_command(cmd),
            Target::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Target::Single(conn) => conn.req_packed_commands(pipeline, offset, count),
            Target::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Target::Single(conn) => conn.get_db(),
            Target::Cluster(conn) => conn.get_db(),
        }
    }
}

/// A connection attempt bounded by twice the command timeout (the clients' own set-up may
/// retry); `target` names what was tried in the error.
async fn within_timeout<T>(
    target: String,
    connect: impl Future<Output = redis::RedisResult<T>>,
) -> Result<T, CtlError> {
    match tokio::time::timeout(2 * TIMEOUT, connect).await {
        Ok(Ok(conn)) => Ok(conn),
        Ok(Err(err)) => Err(CtlError::Unreachable {
            target,
            reason: err.to_string(),
        }),
        Err(_) => Err(CtlError::Unreachable {
            target,
            reason: "timed out".to_owned(),
        }),
    }
}

/// `--tls-ca FILE`, read.
fn tls_certificates(args: &Connect) -> Result<Option<redis::TlsCertificates>, CtlError> {
    let Some(path) = &args.tls_ca else {
        return Ok(None);
    };
    let pem = std::fs::read(path).map_err(|e| CtlError::BadInput {
        what: "--tls-ca file",
        value: path.display().to_string(),
        reason: format!("{e}; expected a readable PEM file"),
    })?;
    Ok(Some(redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(pem),
    }))
}

/// `url` parsed; `#insecure` (no certificate check) is refused whatever redis-rs features
/// are on.
fn parse_url(what: &'static str, url: &str) -> Result<redis::ConnectionInfo, CtlError> {
    let info = url
        .into_connection_info()
        .map_err(|e| bad_url(what, url, &e))?;
    if let redis::ConnectionAddr::TcpTls { insecure: true, .. } = info.addr() {
        return Err(CtlError::BadInput {
            what,
            value: redact_url(url),
            reason: "`#insecure` turns the server's certificate check off; expected a URL without it (trust a private CA with `--tls-ca`)".to_owned(),
        });
    }
    Ok(info)
}

fn is_tls(info: &redis::ConnectionInfo) -> bool {
    matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. })
}

/// What a bad URL is called in an error: `URL`, or `URL (from `REDIS_URL`)` when it was read
/// from one of [`URL_VARS`].
fn url_what(from: Option<&'static str>) -> &'static str {
    match from {
        None => "URL",
        Some(var) if var == URL_VARS[0] => "URL (from `LOCKCTL_URL`)",
        Some(_) => "URL (from `REDIS_URL`)",
    }
}

/// ` (from `VAR`)` when the URL was read from an environment variable.
fn from_note(from: Option<&'static str>) -> String {
    from.map_or_else(String::new, |var| format!(" (from `{var}`)"))
}

fn bad_url(what: &'static str, url: &str, err: &redis::RedisError) -> CtlError {
    CtlError::BadInput {
        what,
        value: redact_url(url),
        reason: format!("{err}; expected redis://[user:password@]host:port/[db] or rediss://..."),
    }
}

fn redact_all(urls: &[String]) -> String {
    urls.iter()
        .map(|u| redact_url(u))
        .collect::<Vec<_>>()
        .join(", ")
}

/// rustls 0.23 needs a process-wide crypto provider before the first `rediss://` connect.
fn install_crypto_provider() {
    // Err: a provider is installed already, which is all we need.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

#[cfg(test)]
mod tests {
    use super::parse_primaries;

    #[test]
    fn primaries_skip_replicas_and_failed_nodes() {
        let nodes = "\
a 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460
b 127.0.0.1:7001@17001,host-b master - 0 0 2 connected 5461-10922
c 127.0.0.1:7002@17002 slave a 0 0 1 connected
d 127.0.0.1:7003@17003 master,fail - 0 0 3 connected
";
        assert_eq!(
            parse_primaries(nodes),
            vec![
                ("127.0.0.1".to_owned(), 7000),
                ("127.0.0.1".to_owned(), 7001)
            ]
        );
    }
}
