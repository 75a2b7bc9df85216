//! [`Node`]: one Redis endpoint the backend sends its scripts to.
//!
//! A node is a connection that routes and reconnects by itself; it runs no lock protocol (which
//! leases share a call is the backend's choice). It implements redis-rs' [`ConnectionLike`], so
//! a script call (EVALSHA with the NOSCRIPT fallback, see `scripts::Call`) works the same on
//! every kind.
//!
//! A node outlives the runtime that made it, and serves several runtimes at once: once that
//! runtime has shut down (its connection's I/O tasks died with it, see [`RuntimeWatch`]), the
//! next command re-makes the connection on lockcore's background runtime before it sends
//! ([`Revival`]), and every later command is sent from there, so that no caller's runtime
//! takes the connection down with it. While the node's first runtime runs, that costs one
//! atomic load per command and commands are sent from the caller's runtime (redis-rs then
//! starts a reconnect after a failure on that runtime: should it end, the next command fails
//! once and reconnects).

use std::sync::{Arc, OnceLock, PoisonError, RwLock};

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Client, Cmd, FromRedisValue, Pipeline, RedisFuture, Value};

use crate::error::LockError;
use crate::transport::connect::{ConnectOptions, connection_infos, manager_config};
use crate::transport::runtime_watch::RuntimeWatch;
use crate::transport::sentinel::SentinelPrimary;
use crate::transport::slot;
use crate::util::background;

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
    /// Where its wake-up subscriptions connect.
    subscriber: Subscriber,
    /// How `conn` is re-made once its runtime shut down; `None` under Sentinel, whose primary
    /// re-makes its own connection.
    revival: Option<Arc<Revival>>,
}

/// A node's connection re-made on lockcore's background runtime, once the runtime that made
/// the node's first one has shut down. Shared by the node's clones.
struct Revival {
    /// The runtime the node's first connection (`Node::conn`) was made on: the building
    /// runtime, or for a lazy node the runtime of its first command (redis-rs makes a lazy
    /// connection on the runtime of the first request).
    built_on: OnceLock<RuntimeWatch>,
    remake: Remake,
    /// The connection re-made last, and the runtime it was made on.
    current: RwLock<Option<(Conn, RuntimeWatch)>>,
    /// One re-making at a time (a cluster connection is made with a round trip).
    remaking: tokio::sync::Mutex<()>,
}

/// What a connection is re-made from.
#[derive(Clone)]
enum Remake {
    Plain(Client, ConnectionManagerConfig),
    Cluster(ClusterClient),
}

impl Revival {
    fn new(remake: Remake) -> Option<Arc<Revival>> {
        Self::made_on(Some(RuntimeWatch::current()), remake)
    }

    /// The revival of a lazy node, whose connection is made by its first command.
    fn lazy(remake: Remake) -> Option<Arc<Revival>> {
        Self::made_on(None, remake)
    }

    fn made_on(built_on: Option<RuntimeWatch>, remake: Remake) -> Option<Arc<Revival>> {
        let watch = OnceLock::new();
        if let Some(built_on) = built_on {
            let _ = watch.set(built_on);
        }
        Some(Arc::new(Revival {
            built_on: watch,
            remake,
            current: RwLock::new(None),
            remaking: tokio::sync::Mutex::new(()),
        }))
    }

    /// The connection re-made last, while its runtime runs.
    fn live(&self) -> Option<Conn> {
        // Swapped whole, never left half-written: a poisoned lock still holds a valid value.
        let current = self.current.read().unwrap_or_else(PoisonError::into_inner);
        current
            .as_ref()
            .filter(|(_, runtime)| !runtime.shut_down())
            .map(|(conn, _)| conn.clone())
    }

    /// A connection made on a runtime that runs: the one re-made last, or a new one made on
    /// lockcore's background runtime, which no caller's runtime takes down with it.
    ///
    /// # Errors
    /// The cluster's connection error; a client error when the background runtime is
    /// unavailable.
    async fn conn(&self) -> redis::RedisResult<Conn> {
        if let Some(conn) = self.live() {
            return Ok(conn);
        }
        let _one_at_a_time = self.remaking.lock().await;
        if let Some(conn) = self.live() {
            return Ok(conn);
        }
        let remake = self.remake.clone();
        // Made there, the connection's I/O tasks (redis-rs spawns them on the runtime current
        // where it is made) run there too; so does everything it is then used for (see
        // `background::run_command`).
        let (conn, watch) = background::run_command(async move {
            let conn = match remake {
                Remake::Plain(client, config) => {
                    Conn::Plain(ConnectionManager::new_lazy_with_config(client, config)?)
                }
                Remake::Cluster(client) => Conn::Cluster(client.get_async_connection().await?),
            };
            Ok((conn, RuntimeWatch::current()))
        })
        .await?;
        tracing::debug!(
            "the runtime of a lock node's connection shut down; reconnected on lockcore's background runtime"
        );
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Some((conn.clone(), watch));
        Ok(conn)
    }
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

impl Conn {
    async fn command(&mut self, cmd: &Cmd) -> redis::RedisResult<Value> {
        match self {
            Conn::Plain(conn) => conn.req_packed_command(cmd).await,
            Conn::Cluster(conn) => conn.req_packed_command(cmd).await,
            Conn::Sentinel(primary) => primary.req_packed_command(cmd).await,
        }
    }

    async fn commands(
        &mut self,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisResult<Vec<Value>> {
        match self {
            Conn::Plain(conn) => conn.req_packed_commands(pipeline, offset, count).await,
            Conn::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count).await,
            Conn::Sentinel(primary) => primary.req_packed_commands(pipeline, offset, count).await,
        }
    }
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

/// Where a node's wake-up subscriptions connect: a release's `PUBLISH` must reach them.
#[derive(Clone)]
pub(crate) enum Subscriber {
    /// These servers, tried in turn (one node; a cluster's seeds: classic pub/sub is
    /// cluster-wide, so any node hears every release's `PUBLISH`).
    Fixed(Vec<Client>),
    /// The primary Sentinel resolved last (replicas hear `PUBLISH` too, through replication,
    /// but a fail-over may drop them).
    Sentinel(SentinelPrimary),
}

impl Subscriber {
    /// The clients to try, in order, for the next subscription.
    pub(crate) fn clients(&self) -> Vec<Client> {
        match self {
            Subscriber::Fixed(clients) => clients.clone(),
            Subscriber::Sentinel(primary) => vec![primary.client()],
        }
    }
}

impl Node {
    /// Connects to one server now: an unreachable server fails here.
    ///
    /// # Errors
    /// The connection's error, naming the server.
    pub(crate) async fn plain(client: Client, options: &ConnectOptions) -> Result<Node, LockError> {
        let name = name_of(&client);
        let config = manager_config(options);
        let conn = ConnectionManager::new_with_config(client.clone(), config.clone())
            .await
            .map_err(|e| from_node(e, &name))?;
        Ok(Node {
            conn: Conn::Plain(conn),
            name,
            subscriber: Subscriber::Fixed(vec![client.clone()]),
            revival: Revival::new(Remake::Plain(client, config)),
        })
    }

    /// A node that connects on first use (and reconnects in the background), so that a
    /// Redlock manager can be built while some of its nodes are down.
    ///
    /// # Errors
    /// A client redis-rs refuses.
    pub(crate) fn lazy(client: Client, options: &ConnectOptions) -> Result<Node, LockError> {
        let name = name_of(&client);
        let config = manager_config(options);
        let conn = ConnectionManager::new_lazy_with_config(client.clone(), config.clone())?;
        Ok(Node {
            conn: Conn::Plain(conn),
            name,
            subscriber: Subscriber::Fixed(vec![client.clone()]),
            revival: Revival::lazy(Remake::Plain(client, config)),
        })
    }

    /// Connects to a Redis Cluster through its seed nodes now, with bounded retries: every
    /// call stays within about two response timeouts.
    ///
    /// # Errors
    /// [`LockError::InvalidOptions`] for a malformed seed URL; the connection's error, naming
    /// the seeds.
    pub(crate) async fn cluster(
        seeds: &[String],
        options: &ConnectOptions,
    ) -> Result<Node, LockError> {
        let infos = connection_infos(seeds, options)?;
        let name: Arc<str> = format!(
            "Redis Cluster, seeds {}",
            infos
                .iter()
                .map(|info| info.addr().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )
        .into();
        let subscriber = Subscriber::Fixed(
            infos
                .iter()
                .map(|info| options.tls.client(info.clone()))
                .collect::<redis::RedisResult<Vec<_>>>()?,
        );
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
            subscriber,
            revival: Revival::new(Remake::Cluster(client)),
        })
    }

    /// The primary Sentinel resolves, as a node.
    pub(crate) fn sentinel(primary: SentinelPrimary, master_name: &str) -> Node {
        Node {
            subscriber: Subscriber::Sentinel(primary.clone()),
            conn: Conn::Sentinel(primary),
            name: format!("primary `{master_name}` through Sentinel").into(),
            revival: None,
        }
    }

    /// The connection re-made on lockcore's background runtime when the one this node was made
    /// with died with its runtime (send on it only through `background::run_command`); `None` (use `conn`) while that runtime runs: one atomic load.
    async fn revived(&self) -> redis::RedisResult<Option<Conn>> {
        match &self.revival {
            Some(revival)
                if revival
                    .built_on
                    .get_or_init(RuntimeWatch::current)
                    .shut_down() =>
            {
                revival.conn().await.map(Some)
            }
            _ => Ok(None),
        }
    }

    /// Where this node's wake-up subscriptions connect.
    pub(crate) fn subscriber(&self) -> Subscriber {
        self.subscriber.clone()
    }

    /// Whether the connection may send a command twice: the cluster client re-sends after a
    /// dropped connection or a timeout, so a script may find its own earlier run's work.
    pub(crate) fn resends_commands(&self) -> bool {
        matches!(self.conn, Conn::Cluster(_))
    }

    /// Whether one script call can touch every key of `keys`: always on one server; on a
    /// cluster only when they share a slot.
    pub(crate) fn one_call<'k>(&self, mut keys: impl Iterator<Item = &'k str>) -> bool {
        if !matches!(self.conn, Conn::Cluster(_)) {
            return true;
        }
        let first = keys.next().map(|key| slot::key_hash_slot(key.as_bytes()));
        keys.all(|key| Some(slot::key_hash_slot(key.as_bytes())) == first)
    }

    /// `items` in the groups that one script call each can take: one group on one server, one
    /// per slot on a cluster (so that each shard is called on its own). Every item lands in
    /// exactly one group.
    pub(crate) fn calls<T>(&self, items: Vec<T>, key_of: impl Fn(&T) -> &str) -> Vec<Vec<T>> {
        if matches!(self.conn, Conn::Cluster(_)) {
            slot::group_by_slot(items, key_of)
        } else {
            vec![items]
        }
    }

    /// Ends the node's background work for good (the manager is closed): under Sentinel, the
    /// `+switch-master` subscription.
    pub(crate) fn close(&self) {
        if let Conn::Sentinel(primary) = &self.conn {
            primary.close();
        }
    }

    /// Runs `cmd` on the one server that serves `key`: on a cluster the primary of the key's
    /// slot, for a command the cluster client would otherwise send to every node (such as
    /// `SCRIPT LOAD`, whose reply would then wait for the slowest shard); otherwise this node.
    pub(crate) async fn query_for_key<T: FromRedisValue>(
        &mut self,
        key: &[u8],
        cmd: Cmd,
    ) -> redis::RedisResult<T> {
        let revived = self.revived().await.map_err(|e| from_node(e, &self.name))?;
        if let Conn::Cluster(conn) = revived.as_ref().unwrap_or(&self.conn) {
            let route = Route::with_key(key, SlotAddr::Master);
            let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
            let mut conn = conn.clone();
            let call = async move { conn.route_command(cmd, routing).await };
            let value = if revived.is_some() {
                background::run_command(call).await
            } else {
                call.await
            }
            .map_err(|e| from_node(e, &self.name))?;
            return Ok(T::from_redis_value(value)?);
        }
        cmd.query_async(self).await
    }

    /// Runs `pipeline` on one connection to the server that serves `key` (on a cluster, the
    /// primary of its slot): a `WAIT` in it covers the writes of the commands before it.
    pub(crate) async fn pipeline_for_key(
        &self,
        pipeline: &Pipeline,
        key: &str,
    ) -> redis::RedisResult<Vec<Value>> {
        let count = pipeline.len();
        let revived = self.revived().await.map_err(|e| from_node(e, &self.name))?;
        match revived.as_ref().unwrap_or(&self.conn) {
            Conn::Cluster(conn) => {
                let mut conn = conn.clone();
                let route = SingleNodeRoutingInfo::SpecificNode(Route::new(
                    slot::key_hash_slot(key.as_bytes()),
                    SlotAddr::Master,
                ));
                let pipeline = pipeline.clone();
                let call = async move { conn.route_pipeline(pipeline, 0, count, route).await };
                if revived.is_some() {
                    background::run_command(call).await
                } else {
                    call.await
                }
                .map_err(|e| from_node(e, &self.name))
            }
            Conn::Plain(_) | Conn::Sentinel(_) => {
                self.clone().req_packed_commands(pipeline, 0, count).await
            }
        }
    }
}

/// The address of `client`, as its errors name it.
fn name_of(client: &Client) -> Arc<str> {
    client.get_connection_info().addr().to_string().into()
}

impl ConnectionLike for Node {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let revived = self.revived().await.map_err(|e| from_node(e, &self.name))?;
            let reply = match revived {
                Some(mut conn) => {
                    let cmd = cmd.clone();
                    background::run_command(async move { conn.command(&cmd).await }).await
                }
                None => self.conn.command(cmd).await,
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
            let revived = self.revived().await.map_err(|e| from_node(e, &self.name))?;
            let replies = match revived {
                Some(mut conn) => {
                    let pipeline = pipeline.clone();
                    background::run_command(
                        async move { conn.commands(&pipeline, offset, count).await },
                    )
                    .await
                }
                None => self.conn.commands(pipeline, offset, count).await,
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
