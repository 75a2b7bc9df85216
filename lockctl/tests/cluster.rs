//! `lockctl --cluster` against a real 3-primary Redis Cluster started here with
//! `redis-server --cluster-enabled yes` and `redis-cli --cluster create`.
//!
//! lockcore has no Cluster backend on this branch yet, so the locks are written the way the
//! library writes them (`<token> <metadata JSON>`, waiter queue keys from
//! `lockcore::keyspace::waiter_queue_keys`, in the lock key's slot).

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::process::Command;
use std::time::Duration;

use common::{fails_with, json, ok, record};
use lockcore_tests::RedisServer;
use redis::AsyncCommands;
use redis::cluster_async::ClusterConnection;

/// Three primaries, no replicas, all slots assigned, `cluster_state:ok` on every node.
async fn start_cluster() -> Vec<RedisServer> {
    let nodes: Vec<RedisServer> = (0..3)
        .map(|_| RedisServer::start_with_args(&["--cluster-enabled", "yes"]))
        .collect();
    let addrs: Vec<String> = nodes
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.port()))
        .collect();
    let out = Command::new("redis-cli")
        .args(["--cluster", "create"])
        .args(&addrs)
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .output()
        .unwrap_or_else(|e| panic!("redis-cli --cluster create: {e} (is redis-tools installed?)"));
    assert!(out.status.success(), "cluster create: {out:?}");
    for node in &nodes {
        let mut con = node.connection().await;
        let mut ok = false;
        for _ in 0..500 {
            let info: String = redis::cmd("CLUSTER")
                .arg("INFO")
                .query_async(&mut con)
                .await
                .unwrap_or_default();
            if info.contains("cluster_state:ok") {
                ok = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(ok, "cluster_state never became ok on {}", node.url());
    }
    nodes
}

async fn cluster_connection(seeds: &[String]) -> ClusterConnection {
    redis::cluster::ClusterClient::new(seeds.to_vec())
        .expect("cluster client")
        .get_async_connection()
        .await
        .expect("cluster connection")
}

fn value(token: &str, label: &str) -> String {
    format!(
        "{token} {{\"host\":\"node-{label}\",\"pid\":{},\"label\":\"{label}\",\"acquired_at\":1764579600000}}",
        std::process::id()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_inspect_release_and_watch_on_a_cluster() {
    let nodes = start_cluster().await;
    let seeds: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let seed_arg = seeds.join(",");
    let mut con = cluster_connection(&seeds).await;
    // Keys in different slots, so that they spread over the primaries.
    let keys = [
        "lock:order:1",
        "lock:order:2",
        "lock:{user:7}:cart",
        "lock:stock:9",
    ];
    let mut slots_seen = std::collections::HashSet::new();
    for (i, key) in keys.iter().enumerate() {
        let token = format!("00000000-0000-4000-8000-00000000000{i}");
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg(value(&token, &format!("h{i}")))
            .arg("PX")
            .arg(60_000)
            .query_async(&mut con)
            .await
            .expect("SET");
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query_async(&mut con)
            .await
            .expect("KEYSLOT");
        slots_seen.insert(slot / 5461);
    }
    assert!(
        slots_seen.len() >= 2,
        "keys should land on several primaries"
    );
    // A live waiter queued on order:1, as the acquire script queues it.
    let (queue, entries) = lockcore::keyspace::waiter_queue_keys("lock:", "lock:order:1");
    let token = "11111111-1111-4111-8111-111111111111";
    let waiter = value(token, "waiter");
    let _: () = con.rpush(&queue, &waiter).await.expect("RPUSH");
    let live_until = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis()
        + 60_000;
    let counter = "lock:__fencing_counter__";
    let entry = format!(
        "{live_until}|60000|1|500|{}|{counter}lock:__wake__:x",
        counter.len()
    );
    let _: () = con.hset(&entries, token, entry).await.expect("HSET");

    let records = json(&["--cluster", &seed_arg, "list", "--json"]).await;
    let listed: Vec<&str> = records.iter().filter_map(|r| r["key"].as_str()).collect();
    let mut expected = keys.to_vec();
    expected.sort_unstable();
    assert_eq!(
        listed, expected,
        "every primary scanned, queue keys skipped"
    );
    let order1 = record(&records, "lock:order:1");
    assert_eq!(order1["label"], "h0");
    assert!(order1["pttl_ms"].as_i64().is_some_and(|p| p > 50_000));
    assert_eq!(order1["waiters"][0]["label"], "waiter");
    // Seeds given one flag each, after the subcommand.
    let again = json(&[
        "list",
        "--json",
        "--cluster",
        &seeds[0],
        "--cluster",
        &seeds[1],
    ])
    .await;
    assert_eq!(again.len(), keys.len());

    let inspected = json(&["--cluster", &seed_arg, "inspect", "lock:stock:9", "--json"]).await;
    assert_eq!(inspected[0]["label"], "h3");
    fails_with(
        &["--cluster", &seed_arg, "inspect", "lock:nope"],
        &["no such key"],
    )
    .await;

    let out = ok(&[
        "--cluster",
        &seed_arg,
        "release",
        "lock:{user:7}:cart",
        "--force",
    ])
    .await;
    assert!(out.contains("released lock:{user:7}:cart"), "{out}");
    let gone: Option<String> = con.get("lock:{user:7}:cart").await.expect("GET");
    assert_eq!(gone, None);

    let watched = ok(&[
        "--cluster",
        &seed_arg,
        "watch",
        "--iterations",
        "2",
        "--interval",
        "10",
    ])
    .await;
    assert_eq!(watched.matches("lock:order:1").count(), 2, "{watched}");
    assert_eq!(watched.matches("3 lock(s)").count(), 2, "{watched}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotency_records_on_a_cluster() {
    let nodes = start_cluster().await;
    let seeds: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let seed_arg = seeds.join(",");
    let mut con = cluster_connection(&seeds).await;
    // Written as `lockcore::idempotency` writes them: a stored record, and the lock of a first
    // call that still runs (its record key, in the same slot, does not exist yet).
    let record_json =
        "{\"v\":1,\"at_ms\":1764579600000,\"fingerprint\":null,\"value\":{\"order\":7}}";
    let _: () = redis::cmd("SET")
        .arg(rec("req:a"))
        .arg(record_json)
        .arg("PX")
        .arg(60_000)
        .query_async(&mut con)
        .await
        .expect("SET record");
    let _: () = redis::cmd("SET")
        .arg(lck("req:b"))
        .arg(value("22222222-2222-4222-8222-222222222222", "runner"))
        .arg("PX")
        .arg(30_000)
        .query_async(&mut con)
        .await
        .expect("SET lock");

    let records = json(&["--cluster", &seed_arg, "list", "--json"]).await;
    assert_eq!(records.len(), 2, "{records:?}");
    let done = record(&records, &rec("req:a"));
    assert_eq!(done["state"], "done");
    assert_eq!(done["size_bytes"], record_json.len());
    assert!(done["pttl_ms"].as_i64().is_some_and(|p| p > 50_000));
    let running = record(&records, &rec("req:b"));
    assert_eq!(running["state"], "running");
    assert_eq!(running["holder"]["label"], "runner");
    assert!(running["pttl_ms"].as_i64().is_some_and(|p| p > 20_000));

    let inspected = json(&["--cluster", &seed_arg, "inspect", &rec("req:a"), "--json"]).await;
    assert_eq!(inspected[0]["record"]["value"]["order"], 7);
    let detail = ok(&["--cluster", &seed_arg, "inspect", &rec("req:b")]).await;
    assert!(
        detail.contains("running") && detail.contains("runner"),
        "{detail}"
    );
}

/// The record key of idempotency key `key` under the default prefix, as lockcore names it.
fn rec(key: &str) -> String {
    lockcore::keyspace::idempotency_keys("lock:", key).0
}

/// The lock key of idempotency key `key` (its running first call's lock).
fn lck(key: &str) -> String {
    lockcore::keyspace::idempotency_keys("lock:", key).1
}
