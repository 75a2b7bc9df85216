//! Cargo feature `metrics`: `lockcore_hold_seconds` measures the time a holder held the lock,
//! from the guard being returned to its release, not the wait before a hand-over.
#![cfg(feature = "metrics")]
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use lockcore::{LockManager, LockOptions};
use lockcore_tests::RedisServer;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

/// Five hand-overs to a waiter that holds each lock for 20 ms: every recorded hold of the
/// handed-over lock is about 20 ms, though the waiter waited 300 ms for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_over_lock_is_held_from_the_guard_on() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this test binary");
    let server = RedisServer::start();
    let holder = LockManager::connect(&server.url()).await.expect("holder");
    let waiter = LockManager::connect(&server.url()).await.expect("waiter");
    let mut raw = server.connection().await;
    let waiting = lockcore::__private::with_key_template(
        LockOptions::new(Duration::from_secs(10)).wait(Duration::from_secs(5)),
        "waited:<n>",
    );
    let (queue, _) = lockcore::keyspace::waiter_queue_keys("lock:", "lock:held");
    for _ in 0..5 {
        let held = holder
            .acquire("held", &LockOptions::new(Duration::from_secs(10)))
            .await
            .expect("holder");
        let queued = {
            let (waiter, waiting) = (waiter.clone(), waiting.clone());
            tokio::spawn(async move { waiter.acquire("held", &waiting).await })
        };
        while redis::cmd("LLEN")
            .arg(&queue)
            .query_async::<u64>(&mut raw)
            .await
            .expect("LLEN")
            == 0
        {
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        held.release().await.expect("release");
        let handed = queued.await.expect("task").expect("handed over");
        tokio::time::sleep(Duration::from_millis(20)).await;
        handed.release().await.expect("release");
    }
    let holds: Vec<f64> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, _, _, _)| {
            key.key().name() == "lockcore_hold_seconds"
                && key.key().labels().any(|l| l.value() == "waited:<n>")
        })
        .flat_map(|(_, _, _, value)| match value {
            DebugValue::Histogram(xs) => xs.into_iter().map(|x| x.into_inner()).collect(),
            _ => Vec::new(),
        })
        .collect();
    assert_eq!(holds.len(), 5, "{holds:?}");
    for hold in &holds {
        assert!(
            (0.015..0.1).contains(hold),
            "a 20 ms hold after a hand-over recorded as {hold} s: {holds:?}"
        );
    }
}
