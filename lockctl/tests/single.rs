//! `lockctl` against a real single `redis-server`, with locks held by real managers in this
//! process: list, inspect, release and watch, and the one-line errors.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{fails_with, json, lockctl, ok, record};
use lockcore::{LockManager, LockOptions};
use lockcore_tests::RedisServer;
use redis::AsyncCommands;

async fn manager(server: &RedisServer, label: &str) -> LockManager {
    LockManager::builder()
        .url(server.url())
        .process_label(label)
        .build()
        .await
        .unwrap_or_else(|e| panic!("connect: {e}\n{}", server.log()))
}

fn opts(wait_ms: u64) -> LockOptions {
    LockOptions::new(Duration::from_secs(60)).wait(Duration::from_millis(wait_ms))
}

/// Waits until the waiter queue of `key` holds `n` entries (the waiter's own first attempt
/// queued it): a condition polled, not a fixed sleep.
async fn queued(con: &mut redis::aio::MultiplexedConnection, key: &str, n: usize) {
    let (queue, _) = lockcore::keyspace::waiter_queue_keys("lock:", key);
    for _ in 0..500 {
        let len: usize = con.llen(&queue).await.unwrap_or(0);
        if len >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{key}: the waiter never queued");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_json_shows_three_held_locks_with_holder_metadata_and_waiters() {
    let server = RedisServer::start();
    let url = server.url();
    let holder = manager(&server, "holder-a").await;
    let waiter = manager(&server, "waiter-b").await;
    let mut raw = server.connection().await;
    let g1 = holder.acquire("order:1", &opts(0)).await.expect("order:1");
    let g2 = holder.acquire("order:2", &opts(0)).await.expect("order:2");
    let g3 = holder.acquire("stock:{7}", &opts(0)).await.expect("stock");
    let queued_waiter = tokio::spawn(async move {
        let guard = waiter.acquire("order:1", &opts(30_000)).await;
        (guard, waiter)
    });
    queued(&mut raw, "lock:order:1", 1).await;
    // A value written by an older version: a bare token.
    let _: () = raw.set("lock:legacy", "legacy-token").await.expect("SET");
    let _: () = raw
        .set("other:x", "not under the prefix")
        .await
        .expect("SET");

    let records = json(&["--url", &url, "list", "--json"]).await;
    let keys: Vec<&str> = records.iter().filter_map(|r| r["key"].as_str()).collect();
    assert_eq!(
        keys,
        [
            "lock:legacy",
            "lock:order:1",
            "lock:order:2",
            "lock:stock:{7}"
        ],
        "auxiliary keys (fencing counter, waiter queue) are not locks"
    );
    for guard in [&g1, &g2, &g3] {
        let r = record(&records, guard.key());
        let pttl = r["pttl_ms"].as_i64().expect("pttl_ms");
        assert!(pttl > 50_000 && pttl <= 60_000, "{r}");
        assert_eq!(r["token"], guard.token());
        assert_eq!(r["pid"], std::process::id());
        assert_eq!(r["label"], "holder-a");
        assert_eq!(r["holder"]["pid"], std::process::id());
        assert!(r["host"].as_str().is_some_and(|h| !h.is_empty()), "{r}");
        assert!(
            r["acquired_at"]
                .as_u64()
                .is_some_and(|at| at > 1_600_000_000_000)
        );
        assert!(r["fencing_token"].is_null());
    }
    let waiters = record(&records, "lock:order:1")["waiters"]
        .as_array()
        .expect("waiters array")
        .clone();
    assert_eq!(waiters.len(), 1, "{waiters:?}");
    assert_eq!(waiters[0]["label"], "waiter-b");
    assert!(
        record(&records, "lock:order:2")["waiters"]
            .as_array()
            .is_some_and(Vec::is_empty)
    );
    let legacy = record(&records, "lock:legacy");
    assert_eq!(legacy["token"], "legacy-token");
    assert!(legacy["host"].is_null() && legacy["pttl_ms"] == -1);

    // A pattern narrows the listing; the table shows the same locks.
    let narrowed = json(&["--url", &url, "list", "lock:order:*", "--json"]).await;
    assert_eq!(narrowed.len(), 2);
    let table = ok(&["--url", &url, "list"]).await;
    assert!(
        table.contains("lock:stock:{7}") && table.contains("holder-a"),
        "{table}"
    );
    assert!(table.contains("4 lock(s)"), "{table}");

    // The queued waiter gets the lock handed over with the very value it queued with.
    let waiter_token = waiters[0]["token"].as_str().expect("token").to_owned();
    g1.release().await.expect("release");
    let (handed, _waiter) = queued_waiter.await.expect("waiter task");
    let handed = handed.expect("the waiter acquires");
    assert_eq!(handed.token(), waiter_token);
    let now: Option<String> = raw.get("lock:order:1").await.expect("GET");
    assert_eq!(now.as_deref(), Some(handed.stored_value()));
    drop((g2, g3, handed));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_shows_one_lock() {
    let server = RedisServer::start();
    let url = server.url();
    let holder = manager(&server, "inspector").await;
    let guard = holder.acquire("job:9", &opts(0)).await.expect("acquire");
    let records = json(&["--url", &url, "inspect", "lock:job:9", "--json"]).await;
    assert_eq!(records.len(), 1);
    assert_eq!(records[0]["token"], guard.token());
    assert_eq!(records[0]["label"], "inspector");
    let detail = ok(&["--url", &url, "inspect", "lock:job:9"]).await;
    assert!(
        detail.contains(guard.token()) && detail.contains("inspector"),
        "{detail}"
    );
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_force_frees_the_lock_and_refuses_another_holder() {
    let server = RedisServer::start();
    let url = server.url();
    let holder = manager(&server, "stuck").await;
    let mut raw = server.connection().await;
    let stuck = holder.acquire("pay:1", &opts(0)).await.expect("acquire");
    let old_token = stuck.token().to_owned();

    fails_with(
        &["--url", &url, "release", "lock:pay:1"],
        &["--force", "lock:pay:1"],
    )
    .await;
    let out = ok(&["--url", &url, "release", "lock:pay:1", "--force"]).await;
    assert!(
        out.contains("released lock:pay:1") && out.contains(&old_token),
        "{out}"
    );
    assert!(out.contains("label=stuck"), "{out}");
    let gone: Option<String> = raw.get("lock:pay:1").await.expect("GET");
    assert_eq!(gone, None);
    assert!(stuck.release().await.is_err_and(|e| e.is_lost()));

    // A new holder took it: releasing "the holder I inspected" (the old token) is refused.
    let fresh = holder.acquire("pay:1", &opts(0)).await.expect("re-acquire");
    fails_with(
        &[
            "--url",
            &url,
            "release",
            "lock:pay:1",
            "--force",
            "--token",
            &old_token,
        ],
        &["lock:pay:1", &old_token, fresh.token()],
    )
    .await;
    let kept: Option<String> = raw.get("lock:pay:1").await.expect("GET");
    assert_eq!(kept.as_deref(), Some(fresh.stored_value()));
    fresh
        .release()
        .await
        .expect("the new holder still holds it");
}

/// `release --force` is the library's release: a queued waiter is handed the lock in the same
/// call, so the key holds the waiter's token the moment `lockctl` returns, instead of being
/// deleted and left for the waiter's next re-check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_force_hands_the_lock_to_the_queued_waiter() {
    let server = RedisServer::start();
    let url = server.url();
    let holder = manager(&server, "stuck").await;
    let waiter = LockManager::builder()
        .url(server.url())
        .fencing_counter(lockcore::FencingCounter::Off)
        .build()
        .await
        .expect("connect");
    let mut raw = server.connection().await;
    let stuck = holder.acquire("pay:2", &opts(0)).await.expect("acquire");
    let waiting = tokio::spawn(async move { waiter.acquire("pay:2", &opts(30_000)).await });
    queued(&mut raw, "lock:pay:2", 1).await;

    ok(&["--url", &url, "release", "lock:pay:2", "--force"]).await;
    let now: Option<String> = raw.get("lock:pay:2").await.expect("GET");
    let now = now.expect("the key was deleted instead of handed to the waiter");
    let granted = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiter was never woken")
        .expect("join")
        .expect("the waiter acquires");
    assert_eq!(lockcore::keyspace::split_value(&now).0, granted.token());
    assert!(stuck.release().await.is_err_and(|e| e.is_lost()));
    granted.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_refreshes_a_bounded_number_of_times() {
    let server = RedisServer::start();
    let url = server.url();
    let holder = manager(&server, "watched").await;
    let guard = holder.acquire("w:1", &opts(0)).await.expect("acquire");
    let out = ok(&[
        "--url",
        &url,
        "watch",
        "--interval",
        "20",
        "--iterations",
        "3",
    ])
    .await;
    assert_eq!(out.matches("lockctl watch lock:*").count(), 3, "{out}");
    assert_eq!(out.matches("lock:w:1").count(), 3, "{out}");
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gives_one_line_and_a_non_zero_exit() {
    let mut server = RedisServer::start();
    let url = server.url();
    let mut raw = server.connection().await;
    let _: () = raw.rpush("lock:a-list", "x").await.expect("RPUSH");
    let counter = "lock:__fencing_counter__";
    let _: () = raw.set(counter, 3).await.expect("SET");
    for sub in ["inspect", "release"] {
        let force = if sub == "release" {
            vec!["--force"]
        } else {
            vec![]
        };
        let with = |key: &'static str| {
            let mut args = vec!["--url", url.as_str(), sub, key];
            args.extend(&force);
            args
        };
        fails_with(&with("lock:missing"), &["no such key `lock:missing`"]).await;
        fails_with(&with("lock:__fencing_counter__"), &["auxiliary"]).await;
    }
    // `inspect` shows a list as not a lock (tests/not_a_lock.rs); `release` refuses it.
    fails_with(
        &["--url", &url, "release", "lock:a-list", "--force"],
        &["`lock:a-list` is a list", "expected a string"],
    )
    .await;
    fails_with(&["--url", "definitely not a url", "list"], &["bad URL"]).await;
    server.stop();
    fails_with(&["--url", &url, "list"], &["cannot connect", &url]).await;
    fails_with(&["list"], &["expected one of `--url URL`"]).await;
    // clap's own usage errors exit with 2 and never panic.
    let run = lockctl(&["--url", &url, "--cluster", &url, "list"]).await;
    assert_eq!(run.code, Some(2), "{run:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passwords_are_never_printed() {
    let server = RedisServer::start();
    let mut raw = server.connection().await;
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "ops", "on", ">s3cret-pw", "~*", "&*", "+@all"])
        .query_async(&mut raw)
        .await
        .expect("ACL SETUSER");
    let good = format!("redis://ops:s3cret-pw@127.0.0.1:{}/", server.port());
    let bad = format!("redis://ops:wrong-pw@127.0.0.1:{}/", server.port());
    let err = fails_with(&["--url", &bad, "list"], &["cannot connect", "***"]).await;
    assert!(!err.contains("wrong-pw"), "{err}");
    let run = lockctl(&["--url", &good, "inspect", "lock:none"]).await;
    assert!(
        !run.stderr.contains("s3cret") && !run.stdout.contains("s3cret"),
        "{run:?}"
    );
    assert_eq!(json(&["--url", &good, "list", "--json"]).await.len(), 0);
}

/// A lock taken by `#[distributed_lock]`: its template is in the holder metadata.
#[lockcore::distributed_lock(key = "report:<day>", ttl_ms = 60_000, manager = locks)]
async fn make_report(
    locks: &LockManager,
    day: u32,
    url: &str,
) -> Result<Vec<serde_json::Value>, lockcore::LockError> {
    Ok(json(&["--url", url, "list", "--json"]).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_from_the_attribute_show_their_key_template() {
    let server = RedisServer::start();
    let locks = manager(&server, "reports").await;
    let records = make_report(&locks, 7, &server.url()).await.expect("report");
    let r = record(&records, "lock:report:7");
    assert_eq!(r["key_template"], "report:<day>");
    assert_eq!(r["label"], "reports");
}
