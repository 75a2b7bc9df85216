//! The default manager keeps working from any runtime: built in a runtime that then shuts down
//! (as under `#[tokio::test]`, a runtime per test), it serves the attribute, the watchdog and a
//! queued hand-off in the next runtimes, with no failed first call.
//!
//! The default manager can be set once per process, so the flow is one test that builds
//! runtime A, sets the default manager, drops A, then uses it from runtimes B and C, each run
//! the way `#[tokio::test]` runs a test (its own runtime, dropped at the end).
//!
//! `cargo test` also runs those tests at once: the last tests share one manager between two
//! runtimes that run together, and end one of them while the other's watchdog lease, queued
//! waiter or command in flight depends on what the ended one started.

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

/// A Redlock manager's node connections are made on first use: built on a runtime that keeps
/// running, first used on a short-lived one that then ends, its next call from the long-lived
/// runtime still succeeds (the connection made on the short-lived runtime is re-made). Twin: a
/// manager first used on the long-lived runtime.
#[test]
fn a_redlock_manager_first_used_on_a_runtime_that_ends() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    for first_on_short_lived in [false, true] {
        let main = multi_thread_runtime(2);
        let locks = main.block_on(async {
            LockManager::builder()
                .nodes(servers.iter().map(RedisServer::url))
                .build()
                .await
                .expect("redlock manager")
        });
        let what = if first_on_short_lived {
            "first used on a runtime that ended"
        } else {
            "twin: first used on the long-lived runtime"
        };
        if first_on_short_lived {
            let short = current_thread_runtime();
            short.block_on(round_trip(
                &locks,
                "rt:first",
                &format!("short-lived, {what}"),
            ));
            drop(short);
        } else {
            main.block_on(round_trip(&locks, "rt:first", what));
        }
        main.block_on(round_trip(&locks, "rt:next", &format!("next call, {what}")));
    }
}

/// ... and a Redis Cluster manager (redis-rs' cluster connection).
#[test]
fn a_cluster_manager_outlives_the_runtime_that_built_it() {
    let cluster = RedisCluster::start();
    outlives_its_runtime("cluster", async || cluster_manager(&cluster).await);
}

/// `cargo test` runs `#[tokio::test]`s at once, one runtime each, all on one default manager.
/// Runtime B starts the watchdog's scheduler (its lease is registered first); C's lease is
/// registered while B's scheduler runs; then B ends. C's lease must still be renewed (the
/// scheduler must not die with B). Control: a lease of C without the watchdog, same TTL,
/// observed the same way, does expire (so the probe sees an unrenewed key).
#[test]
fn the_watchdog_survives_a_concurrent_runtime_ending() {
    let server = RedisServer::start();
    let locks: LockManager = current_thread_runtime().block_on(async {
        let locks = manager(&server).await;
        acquire_and_release(&locks, "rt:warm", &opts(3_000, 0), "runtime A").await;
        locks
    }); // A is dropped: the next caller's runtime runs the connection and the scheduler.
    let (in_b, in_c) = (locks.clone(), locks.clone());
    let (b_holds, c_may_start) = tokio::sync::oneshot::channel::<()>();
    let (c_holds, b_may_end) = tokio::sync::oneshot::channel::<()>();
    let b = std::thread::spawn(move || {
        // B's runtime runs (as a test's does) until B ends; then its tasks are dropped.
        current_thread_runtime().block_on(async move {
            let guard = in_b
                .acquire("rt:wd:b", &opts(400, 0).watchdog(true))
                .await
                .expect("B acquire");
            b_holds.send(()).unwrap();
            b_may_end.await.unwrap();
            std::mem::forget(guard);
        });
    });
    let url = server.url();
    let c = std::thread::spawn(move || {
        current_thread_runtime().block_on(async move {
            c_may_start.await.unwrap();
            let guard = in_c
                .acquire("rt:wd:c", &opts(400, 0).watchdog(true))
                .await
                .expect("C acquire");
            let control = in_c
                .acquire("rt:wd:control", &opts(400, 0))
                .await
                .expect("C control acquire");
            c_holds.send(()).unwrap();
            let mut raw = redis::Client::open(url)
                .unwrap()
                .get_multiplexed_async_connection()
                .await
                .unwrap();
            let mut seen = vec![];
            // 1.6 s: four TTLs, each renewal a third of the way in.
            for _ in 0..8 {
                tokio::time::sleep(Duration::from_millis(200)).await;
                seen.push((
                    pttl(&mut raw, guard.key()).await,
                    pttl(&mut raw, control.key()).await,
                ));
            }
            let released = guard.release().await;
            std::mem::forget(control);
            (seen, released)
        })
    });
    b.join().unwrap();
    let (seen, released) = c.join().unwrap();
    assert!(
        seen.last().is_some_and(|(_, control)| *control < 0),
        "control: the lease without the watchdog should have expired: (PTTL, control PTTL) {seen:?}"
    );
    assert!(
        seen.iter().all(|(pttl, _)| *pttl > 0),
        "C's lease expired after B's runtime ended: (PTTL, control PTTL) {seen:?}"
    );
    assert!(released.is_ok(), "C's release: {released:?}");
}

/// Runtime B re-makes the connection (the manager's runtime A is gone); C's command is in
/// flight (held 500 ms by a proxy) when B's runtime ends: it must complete.
/// Control: the same command under the same latency, with no runtime ending, completes.
#[test]
fn a_command_in_flight_survives_another_runtime_ending() {
    let server = RedisServer::start();
    let helper = multi_thread_runtime(1);
    let proxy = helper.block_on(FaultProxy::start(&server));
    let url = proxy.url();
    in_flight_when_another_runtime_ends(helper, proxy, async || {
        LockManager::builder()
            .url(url)
            .response_timeout(Duration::from_secs(5))
            .build()
            .await
            .expect("manager")
    });
}

/// The same through Sentinel (the primary it resolves is the proxy).
#[test]
fn a_sentinel_command_in_flight_survives_another_runtime_ending() {
    let helper = multi_thread_runtime(1);
    let (setup, proxy) = helper.block_on(SentinelSetup::start_behind_proxy(1));
    in_flight_when_another_runtime_ends(helper, proxy, async || {
        LockManager::builder()
            .sentinel(setup.sentinel_urls(), setup.master_name())
            .response_timeout(Duration::from_secs(5))
            .build()
            .await
            .expect("sentinel manager")
    });
}

/// Builds a manager in runtime A (dropped then); B re-makes its connection; C's call is in
/// flight through `proxy` when B's runtime ends. `helper` runs the proxy.
fn in_flight_when_another_runtime_ends(
    helper: tokio::runtime::Runtime,
    proxy: FaultProxy,
    build: impl AsyncFnOnce() -> LockManager,
) {
    let locks: LockManager = current_thread_runtime().block_on(async {
        let locks = build().await;
        acquire_and_release(&locks, "rt:warm", &opts(3_000, 0), "runtime A").await;
        locks
    }); // A is dropped.
    let in_b = locks.clone();
    let (b_used_it, c_may_start) = std::sync::mpsc::channel::<()>();
    let (c_in_flight, b_may_end) = tokio::sync::oneshot::channel::<()>();
    let b = std::thread::spawn(move || {
        // B's runtime runs (as a test's does) until B ends; then its tasks are dropped.
        current_thread_runtime().block_on(async move {
            // The first caller after A: re-makes the connection.
            acquire_and_release(&in_b, "rt:b", &opts(3_000, 0), "runtime B").await;
            b_used_it.send(()).unwrap();
            b_may_end.await.unwrap();
        });
    });
    c_may_start.recv().unwrap();
    let proxy = std::sync::Arc::new(proxy);
    proxy.set_latency(Direction::Requests, Duration::from_millis(500));
    let in_c_proxy = std::sync::Arc::clone(&proxy);
    let c = std::thread::spawn(move || {
        current_thread_runtime().block_on(async move {
            let control = locks.acquire("rt:c:control", &opts(3_000, 0)).await;
            let call = tokio::spawn({
                let locks = locks.clone();
                async move { locks.acquire("rt:c", &opts(3_000, 0)).await }
            });
            // The call is on the wire (the proxy holds it for 500 ms) when B ends.
            let sent = poll_until(Duration::from_secs(5), Duration::from_millis(2), || {
                let pending = in_c_proxy.pending() > 0;
                async move { pending }
            });
            assert!(sent.await, "C's call never reached the proxy");
            c_in_flight.send(()).unwrap();
            let result = call.await.unwrap();
            (control.map(std::mem::forget), result.map(std::mem::forget))
        })
    });
    b.join().unwrap();
    let (control, result) = c.join().unwrap();
    assert!(
        control.is_ok(),
        "control: the call with no runtime ending: {control:?}"
    );
    assert!(
        result.is_ok(),
        "C's call failed because runtime B ended: {result:?}"
    );
    drop(helper);
}

/// The number of subscribers of the manager's wake-up channel (there is one manager per
/// server in these tests).
async fn wake_subscribers(raw: &mut MultiplexedConnection) -> usize {
    let channels: Vec<String> = redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .arg(CHANNEL_PATTERN)
        .query_async(raw)
        .await
        .unwrap();
    channels.len()
}

/// A waiter's runtime B ends while the hand-off subscription it started is being opened (300
/// ms of reply latency through a proxy); a waiter of runtime C, queued on the same manager,
/// must still get a listener (not re-check every 250 ms for ever). Control: the manager's
/// first subscription shows up on the probe.
#[test]
fn the_handoff_listener_survives_a_runtime_ending_while_it_opens() {
    let server = RedisServer::start();
    let helper = multi_thread_runtime(1);
    let proxy = helper.block_on(FaultProxy::start(&server));
    let url = proxy.url();
    let raw = helper.block_on(server.connection());
    let locks: LockManager = current_thread_runtime().block_on(async {
        let locks = LockManager::builder()
            .url(url)
            .build()
            .await
            .expect("manager");
        acquire_and_release(&locks, "rt:warm", &opts(3_000, 0), "runtime A").await;
        let probe = poll_until(Duration::from_secs(5), Duration::from_millis(10), || {
            let mut raw = raw.clone();
            async move { wake_subscribers(&mut raw).await == 1 }
        });
        assert!(
            probe.await,
            "control: A's listener should show up on the probe"
        );
        locks
    }); // A is dropped, and its listener with it (no waiter: none is opened again).
    let holder = helper.block_on(async {
        let probe = poll_until(Duration::from_secs(5), Duration::from_millis(10), || {
            let mut raw = raw.clone();
            async move { wake_subscribers(&mut raw).await == 0 }
        });
        assert!(probe.await, "A's listener should have ended with A");
        locks
            .acquire("rt:hand", &opts(30_000, 0))
            .await
            .expect("holder")
    });
    let before = proxy.connections();
    proxy.set_latency(Direction::Replies, Duration::from_millis(300));
    let in_b = locks.clone();
    let (opening, b_may_end) = tokio::sync::oneshot::channel::<()>();
    let b = std::thread::spawn(move || {
        current_thread_runtime().block_on(async move {
            // B queues (which opens the listener on B), and ends while it is being opened.
            let waiting = opts(3_000, 10_000);
            tokio::select! {
                got = in_b.acquire("rt:hand", &waiting) => panic!("B: {got:?}"),
                _ = b_may_end => {}
            }
        });
    });
    helper.block_on(async {
        let connecting = poll_until(Duration::from_secs(5), Duration::from_millis(5), || {
            let more = proxy.connections() > before;
            async move { more }
        });
        assert!(connecting.await, "B never opened the subscription");
    });
    opening.send(()).unwrap();
    b.join().unwrap();
    proxy.set_latency(Direction::Replies, Duration::ZERO);
    let subscribed = current_thread_runtime().block_on(async {
        let waiter = tokio::spawn({
            let locks = locks.clone();
            async move { locks.acquire("rt:hand", &opts(3_000, 10_000)).await }
        });
        let subscribed = poll_until(Duration::from_secs(5), Duration::from_millis(10), || {
            let mut raw = raw.clone();
            async move { wake_subscribers(&mut raw).await == 1 }
        })
        .await;
        waiter.abort();
        subscribed
    });
    assert!(
        subscribed,
        "C's waiter got no hand-off listener after B's runtime ended while opening it"
    );
    std::mem::forget(holder);
    drop(helper);
}
