//! The default manager keeps working from any runtime: built in a runtime that then shuts down
//! (as under `#[tokio::test]`, a runtime per test), it serves the attribute, the watchdog and a
//! queued hand-off in the next runtimes, with no failed first call.
//!
//! The default manager can be set once per process, so the flow is one test that builds
//! runtime A, sets the default manager, drops A, then uses it from runtimes B and C, each run
//! the way `#[tokio::test]` runs a test (its own runtime, dropped at the end).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lockcore::{LockError, LockManager, distributed_lock};
use lockcore_tests::*;
use redis::aio::MultiplexedConnection;

static RUNS: AtomicUsize = AtomicUsize::new(0);

#[distributed_lock(key = "rt:<id>", ttl_ms = 3_000, wait_ms = 2_000)]
async fn locked(id: u32) -> Result<u32, LockError> {
    RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(id)
}

/// The same body on an explicit manager (the twin).
#[distributed_lock(key = "rt:<id>", ttl_ms = 3_000, wait_ms = 2_000, manager = m)]
async fn locked_on(m: &LockManager, id: u32) -> Result<u32, LockError> {
    Ok(id)
}

/// A body that outlives its 400 ms TTL: only the watchdog keeps the key.
#[distributed_lock(key = "rt:long:<id>", ttl_ms = 400, wait_ms = 0, guard = held)]
async fn long_body(id: u32, raw: &mut MultiplexedConnection) -> Result<i64, LockError> {
    let key = held.key().to_owned();
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let _ = id;
    Ok(pttl(raw, &key).await)
}

/// A waiter that queues behind another holder (hand-off queue) and is granted on release.
#[distributed_lock(key = "rt:queued:<id>", ttl_ms = 3_000, wait_ms = 10_000)]
async fn queued(id: u32) -> Result<u32, LockError> {
    Ok(id)
}

/// Everything one "test" does with the default manager in its own runtime.
async fn one_test(server: &RedisServer, id: u32) {
    let mut raw = server.connection().await;
    let first = locked(id).await;
    assert!(
        matches!(first, Ok(got) if got == id),
        "runtime {id}: the first call through the default manager failed: {first:?}"
    );
    assert!(!exists(&mut raw, &full(&format!("rt:{id}"))).await);

    // The watchdog renews past the TTL in this runtime.
    let remaining = long_body(id, &mut raw).await.expect("watchdog call");
    assert!(
        remaining > 0,
        "runtime {id}: the key expired under its body (PTTL {remaining}): no watchdog ran"
    );

    // A queued waiter is handed the lock when the holder releases.
    let locks = lockcore::default_manager().unwrap();
    let key = format!("rt:queued:{id}");
    let holder = locks
        .acquire(&key, &opts(30_000, 0))
        .await
        .unwrap_or_else(|e| panic!("runtime {id}: holder: {e:?}"));
    let waiter = tokio::spawn(queued(id));
    let queue_shows_up = poll_until(Duration::from_secs(5), Duration::from_millis(10), || {
        let mut raw = raw.clone();
        async move { !keys(&mut raw, QUEUE_PATTERN).await.is_empty() }
    })
    .await;
    assert!(queue_shows_up, "runtime {id}: the waiter never queued");
    holder
        .release()
        .await
        .unwrap_or_else(|e| panic!("runtime {id}: release: {e:?}"));
    let granted = waiter.await.unwrap();
    assert!(
        matches!(granted, Ok(got) if got == id),
        "runtime {id}: the queued waiter: {granted:?}"
    );
}

/// Polls `probe` until it returns `true`, at most until `timeout`.
async fn poll_until<F, Fut>(timeout: Duration, every: Duration, mut probe: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    for _ in 0..(timeout.as_millis() / every.as_millis().max(1) + 2) {
        if probe().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(every).await;
    }
    false
}

#[test]
fn the_default_manager_outlives_the_runtime_that_built_it() {
    let server = RedisServer::start();
    {
        // Runtime A builds and sets the default manager, and uses it (its connection, the
        // watchdog and the hand-off listener start here), then shuts down.
        let a = current_thread_runtime();
        a.block_on(async {
            let locks = manager(&server).await;
            lockcore::set_default_manager(locks).expect("set once");
            one_test(&server, 1).await;
        });
    }
    // B (multi-thread) and C (current-thread), each dropped in turn, as `#[tokio::test]`s are.
    multi_thread_runtime(2).block_on(one_test(&server, 2));
    current_thread_runtime().block_on(one_test(&server, 3));
    assert_eq!(RUNS.load(Ordering::SeqCst), 3, "one body per runtime");
}

/// Twin: a manager built in each runtime works there (the scenario the default manager must
/// match).
#[test]
fn twin_a_manager_built_per_runtime_works_in_it() {
    let server = RedisServer::start();
    for id in 1..=3 {
        current_thread_runtime().block_on(async {
            let locks = manager(&server).await;
            assert_eq!(locked_on(&locks, id).await.expect("own manager"), id);
        });
    }
}

/// Acquires and releases `key` on `locks`, or panics naming `what`.
async fn round_trip(locks: &LockManager, key: &str, what: &str) {
    let guard = locks
        .acquire(key, &opts(3_000, 2_000))
        .await
        .unwrap_or_else(|e| panic!("{what}: acquire: {e:?}"));
    guard
        .release()
        .await
        .unwrap_or_else(|e| panic!("{what}: release: {e:?}"));
}

/// Builds a manager in runtime A (and uses it there), drops A, then uses it from runtime B
/// (multi-thread) and C (current-thread), each dropped in turn.
fn outlives_its_runtime(what: &str, build: impl AsyncFnOnce() -> LockManager) {
    let a = current_thread_runtime();
    let locks = a.block_on(async {
        let locks = build().await;
        round_trip(&locks, "rt:other", &format!("runtime A, {what}")).await;
        locks
    });
    drop(a);
    for (name, runtime) in [
        ("B", multi_thread_runtime(2)),
        ("C", current_thread_runtime()),
    ] {
        runtime.block_on(round_trip(
            &locks,
            "rt:other",
            &format!("runtime {name}, {what}"),
        ));
    }
}

/// The same holds for every kind of node, not only the default manager's: a Redlock manager
/// (one lazy connection per node)...
#[test]
fn a_redlock_manager_outlives_the_runtime_that_built_it() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    outlives_its_runtime("Redlock", async || {
        LockManager::builder()
            .nodes(servers.iter().map(RedisServer::url))
            .build()
            .await
            .expect("redlock manager")
    });
}

/// ... and a Redis Cluster manager (redis-rs' cluster connection).
#[test]
fn a_cluster_manager_outlives_the_runtime_that_built_it() {
    let cluster = RedisCluster::start();
    outlives_its_runtime("cluster", async || cluster_manager(&cluster).await);
}
