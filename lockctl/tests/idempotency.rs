//! `lockctl list` and `inspect` of idempotency records against a real single `redis-server`:
//! a stored (`done`) record and a first call still running under its lock (`running`), beside
//! an ordinary lock on the same rendered key.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{json, ok, record};
use lockcore::{Idempotency, LockError, LockManager, LockOptions};
use lockcore_tests::RedisServer;
use tokio::sync::oneshot;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_and_inspect_show_done_and_running_idempotency_records() {
    let server = RedisServer::start();
    let url = server.url();
    let manager = LockManager::builder()
        .url(server.url())
        .process_label("orders-api")
        .build()
        .await
        .unwrap_or_else(|e| panic!("connect: {e}\n{}", server.log()));
    let idem = Idempotency::new(Duration::from_secs(3600)).fingerprint("body-sha-1");

    // A finished first call: its record is stored.
    let order: u64 = manager
        .idempotent("order:req:done", &idem, || async {
            Ok::<u64, LockError>(4242)
        })
        .await
        .expect("first call");
    assert_eq!(order, 4242);

    // A first call that is still running: it holds the idempotency lock until told to finish.
    let (started_tx, started_rx) = oneshot::channel::<()>();
    let (finish_tx, finish_rx) = oneshot::channel::<()>();
    let running = {
        let manager = manager.clone();
        let idem = idem.clone();
        tokio::spawn(async move {
            manager
                .idempotent("order:req:running", &idem, || async move {
                    started_tx.send(()).expect("the test waits");
                    finish_rx.await.expect("the test signals");
                    Ok::<String, LockError>("order-7".to_owned())
                })
                .await
        })
    };
    started_rx.await.expect("the body started");
    // An ordinary lock on the same rendered key as the running record.
    let lock = manager
        .acquire(
            "order:req:running",
            &LockOptions::new(Duration::from_secs(60)),
        )
        .await
        .expect("a record never blocks a lock on the same key");

    let entries = json(&["--url", &url, "list", "--json"]).await;
    let locks: Vec<&str> = entries
        .iter()
        .filter(|e| e["kind"] == "lock")
        .filter_map(|e| e["key"].as_str())
        .collect();
    assert_eq!(locks, ["lock:order:req:running"], "{entries:?}");
    let plain = record(&entries, "lock:order:req:running");
    assert_eq!(plain["token"], lock.token());
    assert!(plain["waiters"].is_array() && plain["pttl_ms"].as_i64() > Some(0));

    let done = record(&entries, &rec("order:req:done"));
    assert_eq!(done["kind"], "idempotency", "{done}");
    assert_eq!(done["state"], "done");
    assert_eq!(done["idempotency_key"], "order:req:done");
    assert_eq!(done["fingerprint"], "body-sha-1");
    let pttl = done["pttl_ms"].as_i64().expect("pttl_ms");
    assert!(pttl > 3_500_000 && pttl <= 3_600_000, "{done}");
    let size = done["size_bytes"].as_u64().expect("size_bytes");
    assert!(size > 10 && size < 200, "{done}");
    assert!(
        done["age_ms"].as_u64().is_some_and(|age| age < 60_000),
        "{done}"
    );
    assert!(
        done.get("record").is_none(),
        "list leaves the stored JSON out"
    );

    let run = record(&entries, &rec("order:req:running"));
    assert_eq!(run["kind"], "idempotency", "{run}");
    assert_eq!(run["state"], "running");
    assert_eq!(run["lock_key"], lck("order:req:running"));
    assert!(run["size_bytes"].is_null(), "{run}");
    assert!(run["pttl_ms"].as_i64().is_some_and(|p| p > 0), "{run}");
    assert!(run["age_ms"].as_u64().is_some(), "{run}");
    assert_eq!(run["holder"]["label"], "orders-api");
    assert_eq!(run["holder"]["pid"], std::process::id());
    assert_eq!(
        entries.len(),
        3,
        "one lock, two records; the idempotency lock is not listed twice: {entries:?}"
    );

    // The tables.
    let table = ok(&["--url", &url, "list"]).await;
    assert!(table.contains("1 lock(s)"), "{table}");
    assert!(table.contains("2 idempotency record(s)"), "{table}");
    assert!(
        table.contains("running") && table.contains("done") && table.contains("orders-api"),
        "{table}"
    );

    // inspect: the record key of each, and the running call's lock key.
    let inspected = json(&["--url", &url, "inspect", &rec("order:req:done"), "--json"]).await;
    assert_eq!(inspected.len(), 1);
    assert_eq!(inspected[0]["state"], "done");
    assert_eq!(inspected[0]["record"]["value"], 4242);
    assert_eq!(inspected[0]["record"]["fingerprint"], "body-sha-1");
    let detail = ok(&["--url", &url, "inspect", &rec("order:req:done")]).await;
    assert!(
        detail.contains("done") && detail.contains("\"value\":4242") && detail.contains("bytes"),
        "{detail}"
    );
    for key in [&rec("order:req:running"), &lck("order:req:running")] {
        let inspected = json(&["--url", &url, "inspect", key, "--json"]).await;
        assert_eq!(inspected[0]["state"], "running", "{inspected:?}");
        assert_eq!(inspected[0]["key"], rec("order:req:running"));
        assert!(inspected[0].get("record").is_none(), "{inspected:?}");
        let detail = ok(&["--url", &url, "inspect", key]).await;
        assert!(
            detail.contains("running") && detail.contains("orders-api"),
            "{detail}"
        );
    }
    common::fails_with(
        &["--url", &url, "inspect", &rec("order:req:none")],
        &["no such key", &rec("order:req:none")],
    )
    .await;

    // The running call finishes: its record is stored, and the listing says so.
    finish_tx.send(()).expect("the body waits");
    let value = running.await.expect("task").expect("the running call");
    assert_eq!(value, "order-7");
    let entries = json(&["--url", &url, "list", "--json"]).await;
    let run = record(&entries, &rec("order:req:running"));
    assert_eq!(run["state"], "done", "{run}");
    assert!(run["holder"].is_null(), "{run}");
    let inspected = json(&[
        "--url",
        &url,
        "inspect",
        &rec("order:req:running"),
        "--json",
    ])
    .await;
    assert_eq!(inspected[0]["record"]["value"], "order-7");
    lock.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_record_is_cut_in_the_table_and_whole_in_json() {
    let server = RedisServer::start();
    let url = server.url();
    let manager = LockManager::connect(&server.url())
        .await
        .unwrap_or_else(|e| panic!("connect: {e}\n{}", server.log()));
    let idem = Idempotency::new(Duration::from_secs(60));
    let long = "x".repeat(5000);
    let stored: String = manager
        .idempotent("big", &idem, || {
            let long = long.clone();
            async move { Ok::<String, LockError>(long) }
        })
        .await
        .expect("stored");
    assert_eq!(stored.len(), 5000);
    let detail = ok(&["--url", &url, "inspect", &rec("big")]).await;
    assert!(detail.contains("more bytes; --json shows all"), "{detail}");
    assert!(detail.len() < 2000, "{detail}");
    let inspected = json(&["--url", &url, "inspect", &rec("big"), "--json"]).await;
    assert_eq!(
        inspected[0]["record"]["value"].as_str().map(str::len),
        Some(5000)
    );
    assert!(inspected[0]["size_bytes"].as_u64() > Some(5000));
}

/// The record key of idempotency key `key` under the default prefix, as lockcore names it.
fn rec(key: &str) -> String {
    lockcore::keyspace::idempotency_keys("lock:", key).0
}

/// The lock key of idempotency key `key` (its running first call's lock).
fn lck(key: &str) -> String {
    lockcore::keyspace::idempotency_keys("lock:", key).1
}
