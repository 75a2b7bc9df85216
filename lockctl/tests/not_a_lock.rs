//! A key under the prefix that holds another Redis type than a string (a list, a hash, ...) is
//! shown by `list`, `watch` and `inspect` as not a lock (`"kind": "not_a_lock"` with its type),
//! in text and in `--json`, while lockcore's own auxiliary keys (waiter queues, which are lists
//! and hashes too, and the fencing counter) stay hidden; `release` still refuses it.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{fails_with, json, ok, record};
use lockcore::{LockManager, LockOptions};
use lockcore_tests::RedisServer;
use redis::AsyncCommands;

/// A list whose name clears the screen: its row must be escaped like any key.
const HOSTILE: &str = "lock:\x1b[2Jjobs";
const HOSTILE_SHOWN: &str = "lock:\\u{1b}[2Jjobs";

fn opts(wait_ms: u64) -> LockOptions {
    LockOptions::new(Duration::from_secs(60)).wait(Duration::from_millis(wait_ms))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_types_are_listed_as_not_a_lock_and_auxiliary_keys_stay_hidden() {
    let server = RedisServer::start();
    let url = server.url();
    let mut raw = server.connection().await;
    let holder = LockManager::connect(&url).await.expect("connect");
    let waiter = LockManager::connect(&url).await.expect("connect");
    let guard = holder.acquire("order:1", &opts(0)).await.expect("acquire");
    let queued = tokio::spawn(async move {
        let got = waiter.acquire("order:1", &opts(30_000)).await;
        (got, waiter)
    });
    let (queue, entries) = lockcore::keyspace::waiter_queue_keys("lock:", guard.key());
    for _ in 0..500 {
        if raw.llen::<_, usize>(&queue).await.unwrap() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _: () = raw.rpush("lock:a-list", "x").await.unwrap();
    let _: () = raw.hset("lock:a-hash", "f", "v").await.unwrap();
    let _: () = raw.sadd("lock:a-set", "m").await.unwrap();
    let _: () = raw.zadd("lock:a-zset", "m", 1).await.unwrap();
    let _: String = redis::cmd("XADD")
        .arg("lock:a-stream")
        .arg("*")
        .arg("f")
        .arg("v")
        .query_async(&mut raw)
        .await
        .unwrap();
    let _: () = raw.rpush(HOSTILE, "x").await.unwrap();
    let _: () = raw.pexpire("lock:a-hash", 90_000).await.unwrap();
    // The auxiliary keys exist, as lists and hashes: hiding them is a decision, not luck.
    let aux_types: Vec<String> = {
        let mut types = Vec::new();
        for key in [&queue, &entries] {
            types.push(
                redis::cmd("TYPE")
                    .arg(key)
                    .query_async(&mut raw)
                    .await
                    .unwrap(),
            );
        }
        types
    };
    assert_eq!(aux_types, ["list", "hash"], "{queue} {entries}");

    let records = json(&["--url", &url, "list", "--json"]).await;
    for (key, kind) in [
        ("lock:a-list", "list"),
        ("lock:a-hash", "hash"),
        ("lock:a-set", "set"),
        ("lock:a-zset", "zset"),
        ("lock:a-stream", "stream"),
        (HOSTILE, "list"),
    ] {
        let r = record(&records, key);
        assert_eq!(r["kind"], "not_a_lock", "{r}");
        assert_eq!(r["type"], kind, "{r}");
        assert!(r["waiters"].as_array().is_some_and(Vec::is_empty), "{r}");
        assert!(r["holder"].is_null(), "{r}");
    }
    let hash = record(&records, "lock:a-hash")["pttl_ms"].as_i64().unwrap();
    assert!(hash > 80_000 && hash <= 90_000, "the key's own TTL: {hash}");
    assert_eq!(record(&records, "lock:a-list")["pttl_ms"], -1);
    assert_eq!(record(&records, "lock:order:1")["kind"], "lock");
    let listed: Vec<&str> = records.iter().filter_map(|r| r["key"].as_str()).collect();
    assert_eq!(
        listed.len(),
        7,
        "one lock, six other keys, no auxiliary key: {listed:?}"
    );
    assert!(!listed.iter().any(|k| k.contains("__")), "{listed:?}");

    let table = ok(&["--url", &url, "list"]).await;
    assert!(table.contains("1 lock(s)"), "{table}");
    assert!(
        table.contains("6 key(s) under the pattern that are not locks"),
        "{table}"
    );
    let row = table
        .lines()
        .find(|l| l.starts_with("lock:a-stream"))
        .unwrap_or_else(|| panic!("no a-stream row: {table}"));
    assert!(row.contains("stream"), "{row}");
    assert!(
        table.contains(HOSTILE_SHOWN) && !table.contains('\x1b'),
        "{table:?}"
    );
    assert!(!table.contains("__waitq__"), "{table}");

    let watch = common::watch_once(&url).await;
    assert!(
        watch.contains("lock:a-list") && watch.contains("not locks"),
        "{watch}"
    );

    let one = json(&["--url", &url, "inspect", "lock:a-zset", "--json"]).await;
    assert_eq!(one.len(), 1, "{one:?}");
    assert_eq!(one[0]["kind"], "not_a_lock");
    assert_eq!(one[0]["type"], "zset");
    let detail = ok(&["--url", &url, "inspect", HOSTILE]).await;
    assert!(
        detail.contains("not_a_lock") && detail.contains("list") && detail.contains(HOSTILE_SHOWN),
        "{detail}"
    );
    assert!(!detail.contains('\x1b'), "{detail:?}");

    // Not a lock, so never released; the auxiliary keys are refused by name.
    fails_with(
        &["--url", &url, "release", "lock:a-list", "--force"],
        &["`lock:a-list` is a list", "not a lock"],
    )
    .await;
    fails_with(&["--url", &url, "inspect", &queue], &["auxiliary"]).await;
    let still: usize = raw.llen("lock:a-list").await.unwrap();
    assert_eq!(still, 1);

    guard.release().await.expect("release");
    let (handed, _waiter) = queued.await.unwrap();
    handed
        .expect("the waiter gets the lock")
        .release()
        .await
        .expect("release");
}
