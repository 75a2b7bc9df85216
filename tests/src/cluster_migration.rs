//! Moving one hash slot between primaries of a [`RedisCluster`], whole or in
//! steps (so a test can act while the slot is half-moved and clients get `ASK`).

use crate::admin::query_async;
use crate::cluster::{RedisCluster, SETTLE_TIMEOUT};
use crate::cluster_view::ClusterNode;
use crate::ports::HOST;

/// Keys moved per `MIGRATE` call, and the bound on calls per slot.
const MIGRATE_BATCH: usize = 100;
const MIGRATE_MAX_BATCHES: usize = 1_000;

/// `MIGRATE` timeout in ms.
const MIGRATE_TIMEOUT_MS: u64 = 5_000;

/// A slot in the middle of a move: `IMPORTING` on the target, `MIGRATING`
/// on the source. Keys still on the source are served there; others get
/// `ASK` to the target. Finish it with [`finish`](Self::finish).
#[derive(Debug)]
#[must_use = "a migration left half-done keeps the slot in MIGRATING/IMPORTING state"]
pub struct SlotMigration {
    slot: u16,
    from: ClusterNode,
    to: ClusterNode,
    others: Vec<ClusterNode>,
}

impl RedisCluster {
    /// Move `slot` to the primary `to`, keys included: `CLUSTER SETSLOT
    /// IMPORTING` on `to`, `MIGRATING` on the owner, `MIGRATE` the keys in
    /// batches, then `SETSLOT NODE` on `to`, the old owner and the other
    /// primaries, and wait until every live node agrees. Clients see `ASK`
    /// during the move and `MOVED` after it; TTLs survive `MIGRATE`.
    ///
    /// # Panics
    ///
    /// If `to` is not a primary, a step fails, or the nodes do not agree
    /// within 20 s (the message has the logs).
    pub async fn migrate_slot(&self, slot: u16, to: &ClusterNode) {
        let Some(migration) = self.begin_slot_migration(slot, to).await else {
            return;
        };
        migration.move_keys(self).await;
        migration.finish(self).await;
    }

    /// The first step of [`migrate_slot`](Self::migrate_slot): mark `slot`
    /// `IMPORTING` on `to` and `MIGRATING` on its owner. `None` when `to`
    /// already owns it.
    ///
    /// # Panics
    ///
    /// If `to` is not a primary or a command fails (the message has the logs).
    pub async fn begin_slot_migration(&self, slot: u16, to: &ClusterNode) -> Option<SlotMigration> {
        let view = self.view().unwrap_or_else(|e| self.fail(&e));
        let Some(from) = view.primary_for_slot(slot).cloned() else {
            self.fail(&format!("no healthy primary serves slot {slot}"))
        };
        if !view
            .nodes
            .iter()
            .any(|n| n.id() == to.id() && n.is_primary())
        {
            self.fail(&format!("{} is not a primary", to.port()));
        }
        if from.id() == to.id() {
            return None;
        }
        let others = view
            .nodes
            .iter()
            .filter(|n| {
                n.is_primary() && !n.is_failing() && n.id() != from.id() && n.id() != to.id()
            })
            .cloned()
            .collect();
        let migration = SlotMigration {
            slot,
            from,
            to: to.clone(),
            others,
        };
        migration
            .setslot(self, &migration.to, "IMPORTING", migration.from.id())
            .await;
        migration
            .setslot(self, &migration.from, "MIGRATING", migration.to.id())
            .await;
        Some(migration)
    }
}

impl SlotMigration {
    /// The slot being moved.
    pub fn slot(&self) -> u16 {
        self.slot
    }

    /// The primary that owned the slot.
    pub fn from(&self) -> &ClusterNode {
        &self.from
    }

    /// The primary the slot moves to.
    pub fn to(&self) -> &ClusterNode {
        &self.to
    }

    /// `MIGRATE` every key of the slot from the source to the target, in
    /// batches of 100 (bounded).
    ///
    /// # Panics
    ///
    /// If a command fails or keys remain after the bound (with the logs).
    pub async fn move_keys(&self, cluster: &RedisCluster) {
        for _ in 0..MIGRATE_MAX_BATCHES {
            let keys = self.keys_left(cluster).await;
            if keys.is_empty() {
                return;
            }
            self.migrate(cluster, &keys).await;
        }
        cluster.fail(&format!(
            "slot {} still had keys after {MIGRATE_MAX_BATCHES} batches",
            self.slot
        ))
    }

    /// The keys of the slot still on the source (at most 1 000).
    ///
    /// # Panics
    ///
    /// If `CLUSTER GETKEYSINSLOT` fails (with the logs).
    pub async fn keys_left(&self, cluster: &RedisCluster) -> Vec<String> {
        query_async(
            self.from.port(),
            redis::cmd("CLUSTER")
                .arg("GETKEYSINSLOT")
                .arg(self.slot)
                .arg(MIGRATE_BATCH * 10),
        )
        .await
        .unwrap_or_else(|e| cluster.fail(&format!("GETKEYSINSLOT {}: {e}", self.slot)))
    }

    /// `MIGRATE` only the keys of the slot for which `pick` is true, leaving the others on the
    /// source: a slot caught half-moved, as a migration between two `MIGRATE` batches leaves
    /// it. Returns the keys moved.
    ///
    /// # Panics
    ///
    /// If a command fails (with the logs).
    pub async fn move_keys_where(
        &self,
        cluster: &RedisCluster,
        pick: impl Fn(&str) -> bool,
    ) -> Vec<String> {
        let keys: Vec<String> = self
            .keys_left(cluster)
            .await
            .into_iter()
            .filter(|key| pick(key))
            .collect();
        if !keys.is_empty() {
            self.migrate(cluster, &keys).await;
        }
        keys
    }

    async fn migrate(&self, cluster: &RedisCluster, keys: &[String]) {
        let mut migrate = redis::cmd("MIGRATE");
        migrate
            .arg(HOST)
            .arg(self.to.port())
            .arg("")
            .arg(0)
            .arg(MIGRATE_TIMEOUT_MS)
            // A key a client created on the target meanwhile (a script's undeclared key) is
            // overwritten, as `redis-cli --cluster fix --cluster-replace` does.
            .arg("REPLACE")
            .arg("KEYS")
            .arg(keys);
        if let Err(e) = query_async::<()>(self.from.port(), &migrate).await {
            cluster.fail(&format!("MIGRATE of slot {}: {e}", self.slot));
        }
    }

    /// `SETSLOT NODE` on the target, the source and the other primaries, then
    /// wait until every live node agrees the target serves the slot. Keys
    /// still on the source are lost to clients: call
    /// [`move_keys`](Self::move_keys) first.
    ///
    /// # Panics
    ///
    /// If a command fails or the nodes do not agree within 20 s (with the logs).
    pub async fn finish(self, cluster: &RedisCluster) {
        let to_id = self.to.id().to_owned();
        for node in [&self.to, &self.from].into_iter().chain(&self.others) {
            self.setslot(cluster, node, "NODE", &to_id).await;
        }
        if let Err(e) = cluster
            .wait_for_primary(self.slot, &to_id, SETTLE_TIMEOUT)
            .await
        {
            cluster.fail(&format!(
                "slot {} did not settle on {}: {e}",
                self.slot,
                self.to.port()
            ));
        }
    }

    /// Abort the move, as `redis-cli --cluster fix` does for a slot with no key moved:
    /// `CLUSTER SETSLOT STABLE` on the target and the source, which keeps serving the slot.
    /// Keys already moved stay on the target, unreachable: abort only before
    /// [`move_keys`](Self::move_keys).
    ///
    /// # Panics
    ///
    /// If a command fails (with the logs).
    pub async fn abort(self, cluster: &RedisCluster) {
        for node in [&self.to, &self.from] {
            let cmd = redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(self.slot)
                .arg("STABLE")
                .to_owned();
            if let Err(e) = query_async::<()>(node.port(), &cmd).await {
                cluster.fail(&format!(
                    "CLUSTER SETSLOT {} STABLE on {}: {e}",
                    self.slot,
                    node.port()
                ));
            }
        }
    }

    async fn setslot(&self, cluster: &RedisCluster, node: &ClusterNode, state: &str, id: &str) {
        let cmd = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(self.slot)
            .arg(state)
            .arg(id)
            .to_owned();
        if let Err(e) = query_async::<()>(node.port(), &cmd).await {
            cluster.fail(&format!(
                "CLUSTER SETSLOT {} {state} on {}: {e}",
                self.slot,
                node.port()
            ));
        }
    }
}
