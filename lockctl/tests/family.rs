//! `lockctl` on semaphores and read-write locks held by real managers: `inspect --json` and
//! `list --json` show the permits used of N (or the readers) with each share's token and
//! remaining lease, and `release --force --token` frees exactly one share.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{fails_with, json, ok, record};
use lockcore::{LockManager, LockOptions};
use lockcore_tests::RedisServer;

fn opts() -> LockOptions {
    LockOptions::new(Duration::from_secs(60)).wait(Duration::ZERO)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_shows_permits_and_release_force_frees_one_share() {
    let server = RedisServer::start();
    let url = server.url();
    let locks = LockManager::connect(&url).await.expect("connect");
    let sem = locks.semaphore("pool", 3);
    let first = sem.acquire(&opts()).await.expect("permit");
    let second = sem.acquire(&opts()).await.expect("permit");

    let records = json(&["--url", &url, "inspect", "lock:pool", "--json"]).await;
    let shares = &record(&records, "lock:pool")["shares"];
    assert_eq!(shares["mode"], "semaphore");
    assert_eq!(shares["permits"], 3);
    assert_eq!(shares["used"], 2);
    let tokens: Vec<&str> = shares["holders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["token"].as_str().unwrap())
        .collect();
    assert!(
        tokens.contains(&first.token()) && tokens.contains(&second.token()),
        "{shares}"
    );
    for holder in shares["holders"].as_array().unwrap() {
        let remaining = holder["remaining_ms"].as_u64().unwrap();
        assert!(remaining > 50_000 && remaining <= 60_000, "{holder}");
    }
    let listed = json(&["--url", &url, "list", "--json"]).await;
    assert_eq!(record(&listed, "lock:pool")["shares"]["used"], 2);
    let table = ok(&["--url", &url, "inspect", "lock:pool"]).await;
    assert!(table.contains("semaphore: 2 of 3 permits used"), "{table}");

    fails_with(
        &["--url", &url, "release", "lock:pool", "--force"],
        &["--token", "lock:pool"],
    )
    .await;
    fails_with(
        &[
            "--url",
            &url,
            "release",
            "lock:pool",
            "--force",
            "--token",
            "nope",
        ],
        &["no live share", "nope"],
    )
    .await;
    let audit = ok(&[
        "--url",
        &url,
        "release",
        "lock:pool",
        "--force",
        "--token",
        first.token(),
    ])
    .await;
    assert!(audit.contains("released one share of lock:pool"), "{audit}");
    assert_eq!(sem.available().await.unwrap(), 2);
    assert!(
        first.release().await.unwrap_err().is_lost(),
        "the forced-out share is lost"
    );
    second.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_shows_readers() {
    let server = RedisServer::start();
    let url = server.url();
    let locks = LockManager::connect(&url).await.expect("connect");
    let rw = locks.rw_lock("prices");
    let readers = [
        rw.read(&opts()).await.unwrap(),
        rw.read(&opts()).await.unwrap(),
    ];
    let records = json(&["--url", &url, "inspect", "lock:prices", "--json"]).await;
    let shares = &record(&records, "lock:prices")["shares"];
    assert_eq!(shares["mode"], "read");
    assert_eq!(shares["permits"], serde_json::Value::Null);
    assert_eq!(shares["used"], 2);
    for reader in readers {
        reader.release().await.unwrap();
    }
}
