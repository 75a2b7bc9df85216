//! `RedisCluster`: creation and routing, slot migration, fail-overs.

use std::time::{Duration, Instant};

use lockcore_tests::{RedisCluster, key_slot};
use redis::AsyncCommands;
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;

use crate::announce;

/// A cluster connection with bounded timeouts and retries (see the spike notes).
async fn connect(cluster: &RedisCluster) -> ClusterConnection {
    ClusterClientBuilder::new(cluster.seed_urls())
        .connection_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_millis(500))
        .retries(3)
        .min_retry_wait(50)
        .max_retry_wait(500)
        .build()
        .expect("cluster client")
        .get_async_connection()
        .await
        .unwrap_or_else(|e| panic!("cluster connection: {e}\n{}", cluster.log()))
}

/// A plain (non-cluster) connection to one node.
async fn node_connection(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("connect {url}: {e}"))
}

/// Retry `GET key` on the cluster connection until it answers (bounded), for
/// the moments right after a topology change.
async fn get_eventually(con: &mut ClusterConnection, key: &str) -> Option<String> {
    let mut last = None;
    for _ in 0..100 {
        match con.get::<_, Option<String>>(key).await {
            Ok(value) => return value,
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("GET {key} kept failing: {last:?}");
}

#[tokio::test]
async fn cluster_is_created_and_routes_keys_to_their_primary() {
    announce("cluster");
    let cluster = RedisCluster::start();
    let nodes = cluster.nodes();
    assert_eq!(nodes.len(), 6, "{nodes:?}");
    assert_eq!(nodes.iter().filter(|n| n.is_primary()).count(), 3);
    let covered: u32 = nodes
        .iter()
        .flat_map(|n| n.slots())
        .map(|(lo, hi)| u32::from(hi - lo) + 1)
        .sum();
    assert_eq!(covered, 16_384);

    let mut con = connect(&cluster).await;
    let keys = [
        "lock:a",
        "lock:b",
        "lock:{order}:1",
        "lock:{order}:2",
        "x",
        "12345",
    ];
    for key in keys {
        let _: () = con.set(key, key).await.expect("SET through the cluster");
    }
    for key in keys {
        let owner = cluster.primary_for_key(key);
        let mut direct = node_connection(&owner.url()).await;
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query_async(&mut direct)
            .await
            .expect("CLUSTER KEYSLOT");
        assert_eq!(slot, key_slot(key.as_bytes()), "slot of {key}");
        let value: Option<String> = direct.get(key).await.expect("GET on the owner");
        assert_eq!(value.as_deref(), Some(key), "{key} on {}", owner.port());
        let other = nodes
            .iter()
            .find(|n| n.is_primary() && n.id() != owner.id())
            .expect("another primary");
        let moved = node_connection(&other.url())
            .await
            .get::<_, Option<String>>(key)
            .await;
        let err = moved.expect_err("a non-owner must redirect");
        assert_eq!(err.code(), Some("MOVED"), "{err}");
    }
}

#[tokio::test]
async fn slot_migration_moves_a_held_key_with_its_ttl() {
    announce("cluster");
    let cluster = RedisCluster::start();
    let key = "lock:{migrate}";
    let slot = RedisCluster::slot_for_key(key);
    let mut con = connect(&cluster).await;
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg("token-1")
        .arg("NX")
        .arg("PX")
        .arg(60_000)
        .query_async(&mut con)
        .await
        .expect("SET NX PX");
    let from = cluster.primary_for_slot(slot);
    let to = cluster
        .nodes()
        .into_iter()
        .find(|n| n.is_primary() && n.id() != from.id())
        .expect("another primary");

    cluster.migrate_slot(slot, &to).await;

    assert_eq!(cluster.primary_for_slot(slot).id(), to.id());
    let mut direct = node_connection(&to.url()).await;
    let value: Option<String> = direct.get(key).await.expect("GET on the new owner");
    assert_eq!(value.as_deref(), Some("token-1"));
    let pttl: i64 = direct.pttl(key).await.expect("PTTL");
    assert!(
        pttl > 0 && pttl <= 60_000,
        "the TTL must survive MIGRATE: {pttl}"
    );
    let old = node_connection(&from.url())
        .await
        .get::<_, Option<String>>(key)
        .await;
    assert_eq!(old.expect_err("old owner").code(), Some("MOVED"));
    // The cluster client follows the MOVED and refreshes its slot map.
    assert_eq!(
        get_eventually(&mut con, key).await.as_deref(),
        Some("token-1")
    );
}

#[tokio::test]
async fn manual_failover_switches_roles() {
    announce("cluster");
    let cluster = RedisCluster::start();
    let key = "lock:{failover}";
    let mut con = connect(&cluster).await;
    let _: () = con.set(key, "v").await.expect("SET");
    let old = cluster.primary_for_key(key);

    let new = cluster.failover_primary_of(key).await;

    assert_ne!(new.id(), old.id());
    assert_eq!(new.primary_id(), None);
    let mut demoted = node_connection(&old.url()).await;
    let role: Vec<redis::Value> = redis::cmd("ROLE")
        .query_async(&mut demoted)
        .await
        .expect("ROLE");
    assert_eq!(
        role.first(),
        Some(&redis::Value::BulkString(b"slave".to_vec())),
        "{role:?}"
    );
    assert_eq!(get_eventually(&mut con, key).await.as_deref(), Some("v"));
}

#[tokio::test]
async fn killed_primary_is_replaced_by_its_replica() {
    announce("cluster");
    let cluster = RedisCluster::start();
    let key = "lock:{kill}";
    let mut con = connect(&cluster).await;
    let slot = RedisCluster::slot_for_key(key);
    // Replication is asynchronous: without WAIT the write may die with the primary.
    let mut owner = node_connection(&cluster.primary_for_key(key).url()).await;
    let _: () = owner.set(key, "v").await.expect("SET");
    // Short WAITs, within the connection's response timeout, until the replica (which may
    // still be syncing with its new primary) acknowledges: at most 5 s.
    let mut acks: i64 = 0;
    for _ in 0..12 {
        acks = redis::cmd("WAIT")
            .arg(1)
            .arg(400)
            .query_async(&mut owner)
            .await
            .expect("WAIT");
        if acks >= 1 {
            break;
        }
    }
    assert_eq!(acks, 1, "the replica must have the key before the kill");

    let killed = cluster.kill_primary_of(key);
    let started = Instant::now();
    let during = con.get::<_, Option<String>>(key).await;
    let first_call = started.elapsed();
    let (new, waited) = cluster
        .wait_for_new_primary(slot, &killed, Duration::from_secs(20))
        .await;
    eprintln!(
        "kill -9 of {}: first GET took {first_call:?} and returned {during:?}; \
         new primary {} after {waited:?}",
        killed.port(),
        new.port()
    );

    assert_ne!(new.id(), killed.id());
    assert!(!cluster.seed_urls().contains(&killed.url()));
    assert_eq!(get_eventually(&mut con, key).await.as_deref(), Some("v"));
}
