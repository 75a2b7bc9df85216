//! Cancellation and panics through the explicit API: an acquire dropped in flight, a guard
//! dropped on a thread without a runtime, and the guard side of an aborted or panicking task
//! that holds a guard. The `#[distributed_lock]` side (dropped, panicking, `?`) is in
//! `attribute_runtime.rs`.

// Test helpers outside `#[test]` fns may panic on failure too (clippy's allow-*-in-tests
// covers only the test fns themselves).
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use lockcore::{LockManager, LockOptions};
use lockcore_tests::*;
use tokio::sync::oneshot;
use tokio::time::{Instant, sleep, timeout};

// ---- acquire dropped in flight ----------------------------------------------------------------

/// 1000 x `timeout(random 0..2000 µs, acquire("cart:5"))` with ttl 30 s, dropping whatever
/// comes back (guards included). Within 1 s after the loop `cart:5` does not exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c09_acquire_dropped_in_flight_leaves_no_lock() {
    let (_server, m, mut raw) = start_with_manager().await;
    let o = LockOptions::new(Duration::from_secs(30));

    let (mut got_guard, mut cut_off) = (0u64, 0u64);
    for _ in 0..1000 {
        let budget = Duration::from_micros(fastrand::u64(0..2000));
        match timeout(budget, m.acquire("cart:5", &o)).await {
            Ok(Ok(guard)) => {
                got_guard += 1;
                drop(guard);
            }
            Ok(Err(e)) => panic!("within 2 ms only a guard or a timeout can come back: {e:?}"),
            Err(_elapsed) => cut_off += 1,
        }
    }
    let seen_by_redis = acquisitions_seen_by_redis(&mut raw).await;
    eprintln!(
        "dropped acquires: {got_guard} guards, {cut_off} cut off, {seen_by_redis} SETs applied"
    );
    assert!(
        cut_off > 0,
        "no acquire was cut off; the test exercised nothing"
    );
    assert!(got_guard > 0);
    assert!(seen_by_redis >= got_guard);

    assert_gone_within(&mut raw, &full("cart:5"), Duration::from_secs(1)).await;
}

/// Deterministic: Redis is paused so the `SET` is surely on the wire when the acquire
/// future is dropped (after 20 ms). Once Redis runs it, the cleanup that follows removes it.
#[tokio::test]
async fn c09_acquire_dropped_while_set_is_on_the_wire() {
    let (_server, m, mut raw) = start_with_manager().await;
    // The warm-up waits like the real call (wait > 0), so the hand-off subscription is already
    // open and the paused Redis holds back the `SET` itself, not the subscription.
    acquire_and_release(&m, "warm-up", &opts(1000, 5000), "warm-up").await;

    pause_all_clients(&mut raw, 300).await;
    let cut = timeout(
        Duration::from_millis(20),
        m.acquire("cart:5", &opts(30_000, 5000)),
    )
    .await;
    assert!(
        cut.is_err(),
        "Redis is paused: the acquire cannot finish in 20 ms"
    );

    assert_set_ran_then_key_gone(
        &mut raw,
        &full("cart:5"),
        2,
        "the dropped acquire's SET ran but its token was not cleaned up",
    )
    .await;
}

/// The twin: the naive `SET NX PX 30000` whose future is dropped after it was sent leaves an
/// orphan lock for the whole TTL.
#[tokio::test]
async fn c09_twin_naive_set_dropped_in_flight_leaves_orphan() {
    let server = RedisServer::start();
    let mut naive = server.connection().await;
    let mut raw = server.connection().await;
    let key = full("cart:5");

    pause_all_clients(&mut raw, 300).await;
    let cut = timeout(
        Duration::from_millis(20),
        naive_set_nx(&key, "naive-token", 30_000).query_async::<Option<String>>(&mut naive),
    )
    .await;
    assert!(cut.is_err());

    assert!(
        appears_within_a_second(&mut raw, &key).await,
        "the dropped SET was applied once Redis ran again"
    );
    assert!(pttl(&mut raw, &key).await > 25_000);
}

// ---- guard side: the holding task is aborted or panics ----------------------------------------

/// Explicit API: a task holding a guard (ttl 10 s) is aborted: the key is gone within a few
/// ms (a spawned release, not the TTL).
#[tokio::test]
async fn c10_aborted_task_releases_its_guard() {
    let (_server, m, mut raw) = start_with_manager().await;

    let (held_tx, held_rx) = oneshot::channel();
    let holder = {
        let m = m.clone();
        tokio::spawn(async move {
            let _guard = must_acquire(&m, "user:1", &opts(10_000, 0)).await;
            held_tx.send(()).expect("test waits");
            std::future::pending::<()>().await;
        })
    };
    held_rx.await.expect("holder acquired");
    assert!(exists(&mut raw, &full("user:1")).await);
    holder.abort();
    assert!(holder.await.is_err_and(|e| e.is_cancelled()));
    assert_gone_within(&mut raw, &full("user:1"), Duration::from_millis(200)).await;
}

/// Explicit API: a task panics while holding a guard (current_thread runtime): the join
/// error carries the original panic and the key is released.
#[tokio::test]
async fn c11_panicking_task_releases_its_guard() {
    let (_server, m, mut raw) = start_with_manager().await;

    let holder = {
        let m = m.clone();
        tokio::spawn(async move {
            let _guard = must_acquire(&m, "user:1", &opts(10_000, 0)).await;
            sleep(Duration::from_millis(5)).await;
            panic!("original panic of the body");
        })
    };
    let err = holder.await.expect_err("the task panicked");
    let payload = err.into_panic();
    assert_eq!(
        payload.downcast_ref::<&str>().copied(),
        Some("original panic of the body")
    );
    assert_gone_within(&mut raw, &full("user:1"), Duration::from_millis(200)).await;
}

// ---- a guard dropped on a plain std::thread with no runtime -----------------------------------

/// Multi-thread runtime: dropping the guard on a plain thread does not panic; the release
/// goes through the manager's runtime and the key is gone shortly after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c12_guard_dropped_on_plain_thread_is_released() {
    let (_server, m, mut raw) = start_with_manager().await;

    let guard = must_acquire(&m, "c12", &opts(30_000, 0)).await;
    let dropped = std::thread::spawn(move || {
        assert!(
            tokio::runtime::Handle::try_current().is_err(),
            "no runtime here"
        );
        drop(guard);
    })
    .join();
    assert!(
        dropped.is_ok(),
        "dropping a guard without a runtime must not panic"
    );
    assert_gone_within(&mut raw, &full("c12"), Duration::from_millis(500)).await;
}

/// A current_thread runtime: the manager's runtime is the test's own; the release spawned
/// from the plain thread runs as soon as the test awaits.
#[tokio::test]
async fn c12_guard_dropped_on_plain_thread_current_thread_runtime() {
    let (_server, m, mut raw) = start_with_manager().await;

    let guard = must_acquire(&m, "c12", &opts(30_000, 0)).await;
    let dropped = std::thread::spawn(move || drop(guard)).join();
    assert!(
        dropped.is_ok(),
        "dropping a guard without a runtime must not panic"
    );
    assert_gone_within(&mut raw, &full("c12"), Duration::from_millis(500)).await;
}

/// With the manager's runtime already shut down: still no panic, and the key expires by
/// its TTL (300 ms).
#[test]
fn c12_guard_dropped_after_runtime_shutdown_expires_by_ttl() {
    let server = RedisServer::start();
    let runtime = current_thread_runtime();
    let (manager, guard): (LockManager, _) = runtime.block_on(async {
        let m = manager(&server).await;
        let g = must_acquire(&m, "c12", &opts(300, 0)).await;
        (m, g)
    });
    let acquired = std::time::Instant::now();
    drop(runtime);

    let dropped = std::thread::spawn(move || drop(guard)).join();
    assert!(
        dropped.is_ok(),
        "dropping a guard whose runtime is gone must not panic"
    );
    drop(manager);

    let mut con = server
        .client()
        .get_connection_with_timeout(Duration::from_secs(2))
        .expect("sync connection");
    let mut gone = false;
    for _ in 0..100 {
        let n: i64 = redis::cmd("EXISTS")
            .arg(full("c12"))
            .query(&mut con)
            .expect("EXISTS");
        if n == 0 {
            gone = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(gone, "the key must expire by its 300 ms TTL");
    assert!(acquired.elapsed() < Duration::from_millis(1300));
}

/// A guard dropped with no runtime leaves the key to its TTL and logs through `tracing`: when
/// no runtime can run the release (the manager's runtime is shut down), dropping the guard
/// says so with a WARN naming the key.
#[test]
fn c12_guard_left_to_ttl_is_logged() {
    let server = RedisServer::start();
    let runtime = current_thread_runtime();
    let guard = runtime.block_on(async {
        let m = manager(&server).await;
        must_acquire(&m, "c12:logged", &opts(300, 0)).await
    });
    drop(runtime);

    let events = CapturedEvents::default();
    let capture = events.clone();
    let dropped = std::thread::spawn(move || {
        tracing::subscriber::with_default(capture, || drop(guard));
    })
    .join();
    assert!(dropped.is_ok(), "no panic");
    let warnings = events.at(tracing::Level::WARN);
    assert!(
        warnings.iter().any(|w| w.contains("lock:c12:logged")),
        "a guard left to its TTL must be logged with its key, got {warnings:?}"
    );
}

/// The release spawned by a drop is bounded: dropping guards while Redis is gone neither panics
/// nor blocks, and the runtime still shuts down promptly.
#[test]
fn c12_drop_while_redis_is_down_does_not_block() {
    let mut server = RedisServer::start();
    let runtime = multi_thread_runtime(2);
    let guards = runtime.block_on(async {
        let m = manager(&server).await;
        let mut guards = Vec::new();
        for i in 0..10 {
            guards.push(must_acquire(&m, &format!("down:{i}"), &opts(30_000, 0)).await);
        }
        guards
    });
    server.stop();
    let started = Instant::now();
    let dropped = std::thread::spawn(move || drop(guards)).join();
    assert!(dropped.is_ok());
    runtime.shutdown_timeout(Duration::from_secs(1));
    assert!(started.elapsed() < Duration::from_millis(1500));
}
