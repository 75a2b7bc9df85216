//! A private Redis Cluster on loopback: 3 primaries + 3 replicas, one
//! process per node, killed on drop.

use std::fmt;
use std::fs;
use std::process::Command;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::admin::{info_field, query, query_async, run_bounded};
use crate::cluster_view::{ClusterNode, ClusterView, SLOT_COUNT, key_slot};
use crate::flavour::{ServerFlavour, ensure_installed, server_flavour};
use crate::poll::{poll_async, poll_sync};
use crate::ports::{HOST, free_ports};
use crate::process::{Member, ServerProcess, arg};

/// Primaries, each with one replica.
const PRIMARIES: usize = 3;

/// `cluster-node-timeout`: how long a node may be unreachable before it is
/// flagged failing (and a replica takes over). Small, so fail-over tests are fast.
pub const NODE_TIMEOUT: Duration = Duration::from_millis(1000);

/// How long `redis-cli --cluster create` may take.
const CREATE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long the cluster may take to agree after a change (creation, fail-over,
/// slot migration).
pub(crate) const SETTLE_TIMEOUT: Duration = Duration::from_secs(20);

/// Pause between topology probes.
const SETTLE_POLL: Duration = Duration::from_millis(50);

/// A Redis Cluster of 3 primaries and 3 replicas on `127.0.0.1`, free ports,
/// `cluster-node-timeout` 1000 ms, each node in its own temp dir with its own
/// `cluster-config-file`. Every process is killed on drop (also on panic).
///
/// ```no_run
/// # async fn demo() {
/// let cluster = lockcore_tests::RedisCluster::start();
/// let client = redis::cluster::ClusterClient::new(cluster.seed_urls()).unwrap();
/// let mut con = client.get_async_connection().await.unwrap();
/// let old = cluster.primary_for_key("lock:a");
/// let new = cluster.failover_primary_of("lock:a").await;
/// assert_ne!(old.id(), new.id());
/// # }
/// ```
pub struct RedisCluster {
    // Field order: processes die before the dir is removed.
    nodes: Vec<Member>,
    flavour: ServerFlavour,
    create_output: String,
    dir: TempDir,
}

impl RedisCluster {
    /// Start six nodes, join them with `redis-cli --cluster create ...
    /// --cluster-replicas 1 --cluster-yes`, and wait until every node reports
    /// `cluster_state:ok` with all 16384 slots assigned and every replica's
    /// link to its primary is up.
    ///
    /// # Panics
    ///
    /// If the binaries are missing (with the install command), or a node does
    /// not start or the cluster does not settle within bounded time (with the
    /// logs of every node).
    pub fn start() -> RedisCluster {
        let flavour = server_flavour();
        ensure_installed(flavour, flavour.server_bin());
        ensure_installed(flavour, flavour.cli_bin());
        let dir = tempfile::Builder::new()
            .prefix("lockcore-cluster")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a temp dir for the cluster: {e}"));
        let mut cluster = RedisCluster {
            nodes: Vec::new(),
            flavour,
            create_output: String::new(),
            dir,
        };
        for port in free_ports(PRIMARIES * 2, true) {
            cluster.spawn_node(port);
        }
        for i in 0..cluster.nodes.len() {
            let port = cluster.nodes[i].port;
            let ready = cluster.nodes[i].process().wait_ready(port);
            if let Err(e) = ready {
                cluster.fail(&format!("node {port} did not start: {e}"));
            }
        }
        let mut create = Command::new(flavour.cli_bin());
        create.arg("--cluster").arg("create");
        create.args(cluster.nodes.iter().map(|n| format!("{HOST}:{}", n.port)));
        create.args(["--cluster-replicas", "1", "--cluster-yes"]);
        match run_bounded(create, CREATE_TIMEOUT) {
            Ok(output) => cluster.create_output = output,
            Err(e) => cluster.fail(&format!("`--cluster create` failed: {e}")),
        }
        if let Err(e) = poll_sync(SETTLE_TIMEOUT, SETTLE_POLL, || cluster.check_settled()) {
            cluster.fail(&format!("the cluster did not settle: {e}"));
        }
        cluster
    }

    fn spawn_node(&mut self, port: u16) {
        let node_dir = self.dir.path().join(format!("node-{port}"));
        fs::create_dir_all(&node_dir)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", node_dir.display()));
        let args = vec![
            arg("--port"),
            arg(port.to_string()),
            arg("--bind"),
            arg(HOST),
            arg("--save"),
            arg(""),
            arg("--appendonly"),
            arg("no"),
            arg("--dir"),
            arg(&node_dir),
            arg("--enable-debug-command"),
            arg("yes"),
            arg("--cluster-enabled"),
            arg("yes"),
            arg("--cluster-config-file"),
            arg(node_dir.join("nodes.conf")),
            arg("--cluster-node-timeout"),
            arg(NODE_TIMEOUT.as_millis().to_string()),
            // Any replica may take over, however stale: tests kill primaries on purpose.
            arg("--cluster-replica-validity-factor"),
            arg("0"),
        ];
        let process = ServerProcess::spawn(self.flavour, &format!("node-{port}"), &node_dir, &args);
        self.nodes.push(Member::new(port, process));
    }

    /// The flavour the nodes run (`redis` or `valkey`).
    pub fn flavour(&self) -> ServerFlavour {
        self.flavour
    }

    /// `redis://127.0.0.1:PORT/` of every node still running: seeds for a
    /// cluster client.
    pub fn seed_urls(&self) -> Vec<String> {
        self.live_ports().map(node_url).collect()
    }

    /// `redis://127.0.0.1:PORT/` of all six nodes, killed ones included.
    pub fn node_urls(&self) -> Vec<String> {
        self.nodes.iter().map(|n| node_url(n.port)).collect()
    }

    /// The hash slot of `key` (hash tags honoured).
    pub fn slot_for_key(key: &str) -> u16 {
        key_slot(key.as_bytes())
    }

    /// The primary serving `slot`, as the first live node answering sees it.
    ///
    /// # Panics
    ///
    /// If no live node answers or none knows a healthy primary for the slot
    /// (the message has the logs).
    pub fn primary_for_slot(&self, slot: u16) -> ClusterNode {
        match self.view().and_then(|view| {
            view.primary_for_slot(slot)
                .cloned()
                .ok_or_else(|| format!("no healthy primary serves slot {slot}"))
        }) {
            Ok(node) => node,
            Err(e) => self.fail(&e),
        }
    }

    /// The primary serving `key`'s slot. See [`primary_for_slot`](Self::primary_for_slot).
    pub fn primary_for_key(&self, key: &str) -> ClusterNode {
        self.primary_for_slot(Self::slot_for_key(key))
    }

    /// Every node as the first live node answering sees it.
    ///
    /// # Panics
    ///
    /// If no live node answers (the message has the logs).
    pub fn nodes(&self) -> Vec<ClusterNode> {
        match self.view() {
            Ok(view) => view.nodes,
            Err(e) => self.fail(&e),
        }
    }

    /// `CLUSTER FAILOVER` on a replica of the primary serving `key`, then wait
    /// until that replica is the slot's primary in the view of every live node
    /// and every live node reports `cluster_state:ok`. Returns the new primary.
    ///
    /// # Panics
    ///
    /// If the primary has no replica or the switch does not complete within
    /// 20 s (the message has the logs).
    pub async fn failover_primary_of(&self, key: &str) -> ClusterNode {
        let slot = Self::slot_for_key(key);
        let view = self.view().unwrap_or_else(|e| self.fail(&e));
        let Some(old) = view.primary_for_slot(slot).cloned() else {
            self.fail(&format!("no healthy primary serves slot {slot}"))
        };
        let Some(replica) = view.replicas_of(old.id()).next().cloned() else {
            self.fail(&format!("primary {} has no replica", old.port()))
        };
        let failover = redis::cmd("CLUSTER").arg("FAILOVER").to_owned();
        if let Err(e) = query_async::<()>(replica.port(), &failover).await {
            self.fail(&format!("CLUSTER FAILOVER on {}: {e}", replica.port()));
        }
        match self
            .wait_for_primary(slot, replica.id(), SETTLE_TIMEOUT)
            .await
        {
            Ok(node) => node,
            Err(e) => self.fail(&format!(
                "fail-over of slot {slot} to {} did not complete: {e}",
                replica.port()
            )),
        }
    }

    /// Kill (`SIGKILL`) the primary serving `key` and return it as it was.
    /// Returns when the process is dead; its replica takes over after about
    /// [`NODE_TIMEOUT`] (see [`wait_for_new_primary`](Self::wait_for_new_primary)).
    pub fn kill_primary_of(&self, key: &str) -> ClusterNode {
        let primary = self.primary_for_key(key);
        match self.nodes.iter().find(|n| n.port == primary.port()) {
            Some(node) => node.process().kill(),
            None => self.fail(&format!("node {} is not one of ours", primary.port())),
        }
        primary
    }

    /// Wait until a node other than `old` serves `slot` in the view of every
    /// live node, and every live node reports `cluster_state:ok`. Returns the
    /// new primary and the time waited.
    ///
    /// # Panics
    ///
    /// If that does not happen within `timeout` (the message has the logs).
    pub async fn wait_for_new_primary(
        &self,
        slot: u16,
        old: &ClusterNode,
        timeout: Duration,
    ) -> (ClusterNode, Duration) {
        let started = Instant::now();
        let found = poll_async(timeout, SETTLE_POLL, || async {
            let view = self.agreed_view_async().await?;
            match view.primary_for_slot(slot) {
                Some(node) if node.id() != old.id() => Ok(node.clone()),
                Some(_) => Err(format!("{} still serves slot {slot}", old.port())),
                None => Err(format!("no healthy primary serves slot {slot}")),
            }
        })
        .await;
        match found {
            Ok(node) => (node, started.elapsed()),
            Err(e) => self.fail(&format!("no new primary for slot {slot}: {e}")),
        }
    }

    /// The logs of every node (and the `--cluster create` output), for panic
    /// messages.
    pub fn log(&self) -> String {
        let mut log = format!(
            "--- {} --cluster create ---\n{}\n",
            self.flavour.cli_bin(),
            self.create_output
        );
        for node in &self.nodes {
            log.push_str(&node.process().log());
        }
        log
    }

    fn live_ports(&self) -> impl Iterator<Item = u16> + '_ {
        self.nodes
            .iter()
            .filter(|n| n.process().is_running())
            .map(|n| n.port)
    }

    /// `CLUSTER NODES` from the first live node that answers.
    pub(crate) fn view(&self) -> Result<ClusterView, String> {
        let mut errors = Vec::new();
        for port in self.live_ports() {
            match query::<String>(port, redis::cmd("CLUSTER").arg("NODES")) {
                Ok(reply) => return ClusterView::parse(&reply),
                Err(e) => errors.push(e),
            }
        }
        Err(format!("no live node answered CLUSTER NODES: {errors:?}"))
    }

    pub(crate) async fn wait_for_primary(
        &self,
        slot: u16,
        id: &str,
        timeout: Duration,
    ) -> Result<ClusterNode, String> {
        poll_async(timeout, SETTLE_POLL, || async {
            let view = self.agreed_view_async().await?;
            match view.primary_for_slot(slot) {
                Some(node) if node.id() == id => Ok(node.clone()),
                Some(node) => Err(format!("slot {slot} is still on {}", node.port())),
                None => Err(format!("no healthy primary serves slot {slot}")),
            }
        })
        .await
    }

    /// The view of the first live node, once every live node reports
    /// `cluster_state:ok` and the same slot owners.
    async fn agreed_view_async(&self) -> Result<ClusterView, String> {
        let mut first: Option<ClusterView> = None;
        for port in self.live_ports() {
            let info: String = query_async(port, redis::cmd("CLUSTER").arg("INFO")).await?;
            if info_field(&info, "cluster_state") != Some("ok") {
                return Err(format!(
                    "node {port}: {:?}",
                    info_field(&info, "cluster_state")
                ));
            }
            let nodes: String = query_async(port, redis::cmd("CLUSTER").arg("NODES")).await?;
            let view = ClusterView::parse(&nodes)?;
            match &first {
                None => first = Some(view),
                Some(reference) => compare_owners(reference, &view, port)?,
            }
        }
        first.ok_or_else(|| "no live node".to_owned())
    }

    /// Every node: `cluster_state:ok`, all slots assigned, six nodes known,
    /// replicas' links up.
    fn check_settled(&self) -> Result<(), String> {
        for port in self.live_ports() {
            let info: String = query(port, redis::cmd("CLUSTER").arg("INFO"))?;
            let state = info_field(&info, "cluster_state");
            let assigned = info_field(&info, "cluster_slots_assigned");
            let known = info_field(&info, "cluster_known_nodes");
            let expected_slots = SLOT_COUNT.to_string();
            let expected_nodes = self.nodes.len().to_string();
            if state != Some("ok")
                || assigned != Some(expected_slots.as_str())
                || known != Some(expected_nodes.as_str())
            {
                return Err(format!(
                    "node {port}: state {state:?}, slots assigned {assigned:?}, known nodes {known:?}"
                ));
            }
            let replication: String = query(port, redis::cmd("INFO").arg("replication"))?;
            if info_field(&replication, "role") == Some("slave")
                && info_field(&replication, "master_link_status") != Some("up")
            {
                return Err(format!("replica {port}: link to its primary is not up"));
            }
        }
        Ok(())
    }

    pub(crate) fn fail(&self, what: &str) -> ! {
        panic!(
            "RedisCluster ({}): {what}\nlogs:\n{}",
            self.flavour,
            self.log()
        )
    }
}

/// Whether two views agree on who serves each slot.
fn compare_owners(a: &ClusterView, b: &ClusterView, port: u16) -> Result<(), String> {
    let owners = |view: &ClusterView| -> Vec<(String, Vec<(u16, u16)>)> {
        let mut owners: Vec<_> = view
            .nodes
            .iter()
            .filter(|n| n.is_primary() && !n.is_failing() && !n.slots().is_empty())
            .map(|n| (n.id().to_owned(), n.slots().to_vec()))
            .collect();
        owners.sort();
        owners
    };
    if owners(a) == owners(b) {
        Ok(())
    } else {
        Err(format!("node {port} does not agree on the slot owners yet"))
    }
}

fn node_url(port: u16) -> String {
    format!("redis://{HOST}:{port}/")
}

impl fmt::Debug for RedisCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisCluster")
            .field("flavour", &self.flavour)
            .field(
                "ports",
                &self.nodes.iter().map(|n| n.port).collect::<Vec<_>>(),
            )
            .field("dir", &self.dir.path())
            .finish()
    }
}
