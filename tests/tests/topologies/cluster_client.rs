//! What the redis-rs cluster client does on the harness's cluster, for the
//! lockcore backend: scripts (EVALSHA by first key, NOSCRIPT fallback,
//! CROSSSLOT, TRYAGAIN during a migration, ASK) and sharded pub/sub across a
//! fail-over.

use std::time::{Duration, Instant};

use lockcore_tests::RedisCluster;
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::io::tcp::TcpSettings;
use redis::{PushInfo, PushKind, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::announce;

/// The bounded configuration the spike recommends: TCP_NODELAY, 500 ms per
/// connect and per request (the request timeout also bounds the retries), 3
/// retries 10..200 ms apart. The defaults (no response timeout, 16 retries
/// at least 1.28 s apart) can block one call for a minute.
fn bounded(cluster: &RedisCluster) -> ClusterClientBuilder {
    ClusterClientBuilder::new(cluster.seed_urls())
        .tcp_settings(TcpSettings::default().set_nodelay(true))
        .connection_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_millis(500))
        .retries(3)
        .min_retry_wait(10)
        .max_retry_wait(200)
}

async fn connect(builder: ClusterClientBuilder, cluster: &RedisCluster) -> ClusterConnection {
    builder
        .build()
        .expect("cluster client")
        .get_async_connection()
        .await
        .unwrap_or_else(|e| panic!("cluster connection: {e}\n{}", cluster.log()))
}

const SET_NX_PX: &str = lockcore_tests::lua::SET_NX_PX;
const EXISTS_TWO: &str = lockcore_tests::lua::EXISTS;

#[tokio::test]
async fn scripts_route_by_first_key_and_reload_after_script_flush() {
    announce("cluster client");
    let cluster = RedisCluster::start();
    let mut con = connect(bounded(&cluster), &cluster).await;
    let script = redis::Script::new(SET_NX_PX);
    for key in ["lock:a", "lock:b", "lock:{order}:1"] {
        let set: Option<String> = script
            .key(key)
            .arg("token")
            .arg(10_000)
            .invoke_async(&mut con)
            .await
            .expect("EVALSHA through the cluster");
        assert_eq!(set.as_deref(), Some("OK"), "{key}");
    }
    for url in cluster.node_urls() {
        let mut node = redis::Client::open(url)
            .expect("url")
            .get_multiplexed_async_connection()
            .await
            .expect("node");
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut node)
            .await
            .expect("SCRIPT FLUSH");
    }
    let after_flush: Option<String> = script
        .key("lock:c")
        .arg("token")
        .arg(10_000)
        .invoke_async(&mut con)
        .await
        .expect("NOSCRIPT falls back to EVAL");
    assert_eq!(after_flush.as_deref(), Some("OK"));
    let cross: redis::RedisResult<i64> = redis::Script::new(EXISTS_TWO)
        .key("lock:a")
        .key("lock:b")
        .invoke_async(&mut con)
        .await;
    assert_eq!(
        cross.expect_err("keys in two slots").kind(),
        redis::ErrorKind::Server(redis::ServerErrorKind::CrossSlot)
    );
}

#[tokio::test]
async fn half_migrated_slot_gives_ask_and_tryagain() {
    announce("cluster client");
    let cluster = RedisCluster::start();
    let mut con = connect(bounded(&cluster), &cluster).await;
    let (held, fresh) = ("lock:{ask}:held", "lock:{ask}:fresh");
    let script = redis::Script::new(SET_NX_PX);
    let set: Option<String> = script
        .key(held)
        .arg("t1")
        .arg(60_000)
        .invoke_async(&mut con)
        .await
        .expect("SET");
    assert_eq!(set.as_deref(), Some("OK"));
    let slot = RedisCluster::slot_for_key(held);
    let from = cluster.primary_for_slot(slot);
    let to = cluster
        .nodes()
        .into_iter()
        .find(|n| n.is_primary() && n.id() != from.id())
        .expect("another primary");

    let migration = cluster
        .begin_slot_migration(slot, &to)
        .await
        .expect("a move");
    // The held key is still on the source: the script runs there (NX fails).
    let again: Option<String> = script
        .key(held)
        .arg("t2")
        .arg(60_000)
        .invoke_async(&mut con)
        .await
        .expect("on the source");
    assert_eq!(again, None);
    // A key the source lacks gets ASK; the client follows it to the target.
    let set: Option<String> = script
        .key(fresh)
        .arg("t3")
        .arg(60_000)
        .invoke_async(&mut con)
        .await
        .expect("via ASK");
    assert_eq!(set.as_deref(), Some("OK"));
    // Keys split between source and target: TRYAGAIN, returned within the bound.
    let started = Instant::now();
    let split: redis::RedisResult<i64> = redis::Script::new(EXISTS_TWO)
        .key(held)
        .key(fresh)
        .invoke_async(&mut con)
        .await;
    assert_eq!(
        split.expect_err("split slot").kind(),
        redis::ErrorKind::Server(redis::ServerErrorKind::TryAgain)
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );

    migration.move_keys(&cluster).await;
    migration.finish(&cluster).await;
    let both: i64 = redis::Script::new(EXISTS_TWO)
        .key(held)
        .key(fresh)
        .invoke_async(&mut con)
        .await
        .expect("after the move");
    assert_eq!(both, 2);
    assert_eq!(cluster.primary_for_slot(slot).id(), to.id());
}

/// Pushes until one of `kind` arrives (bounded), returned with what came before.
async fn wait_push(rx: &mut UnboundedReceiver<PushInfo>, kind: PushKind) -> Option<Vec<Value>> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while let Ok(Some(push)) = tokio::time::timeout_at(deadline.into(), rx.recv()).await {
        if push.kind == kind {
            return Some(push.data);
        }
    }
    None
}

#[tokio::test]
async fn sharded_subscription_ends_on_failover_until_resubscribed() {
    announce("cluster client");
    let cluster = RedisCluster::start();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let subscriber = bounded(&cluster)
        .use_protocol(redis::ProtocolVersion::RESP3)
        .push_sender(tx);
    let mut sub = connect(subscriber, &cluster).await;
    let mut publisher = connect(bounded(&cluster), &cluster).await;
    let channel = "lock:{wake}:ch";
    sub.ssubscribe(channel).await.expect("SSUBSCRIBE");
    assert!(wait_push(&mut rx, PushKind::SSubscribe).await.is_some());
    let receivers: i64 = redis::cmd("SPUBLISH")
        .arg(channel)
        .arg("m1")
        .query_async(&mut publisher)
        .await
        .expect("SPUBLISH");
    assert_eq!(receivers, 1);
    assert!(wait_push(&mut rx, PushKind::SMessage).await.is_some());

    cluster.failover_primary_of(channel).await;

    // The demoted primary drops its shard channels and says so; redis-rs
    // does not subscribe again by itself.
    assert!(
        wait_push(&mut rx, PushKind::SUnsubscribe).await.is_some(),
        "no sunsubscribe push after the fail-over"
    );
    let receivers: i64 = redis::cmd("SPUBLISH")
        .arg(channel)
        .arg("m2")
        .query_async(&mut publisher)
        .await
        .expect("SPUBLISH");
    assert_eq!(receivers, 0, "nobody listens on the new primary");
    sub.ssubscribe(channel).await.expect("SSUBSCRIBE again");
    assert!(wait_push(&mut rx, PushKind::SSubscribe).await.is_some());
    let receivers: i64 = redis::cmd("SPUBLISH")
        .arg(channel)
        .arg("m3")
        .query_async(&mut publisher)
        .await
        .expect("SPUBLISH");
    assert_eq!(receivers, 1);
    assert!(wait_push(&mut rx, PushKind::SMessage).await.is_some());
}
