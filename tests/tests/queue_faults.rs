//! The fair queue against what the field does to it: a key of another type at the lock key, a
//! waiter whose link is slow, and the held time a hand-over reports.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lockcore::{LockError, LockManager, LockOptions};
use lockcore_tests::*;
use lockcore_tests::{Direction, FaultProxy};
use tokio::time::Instant;

/// A list or a hash at the lock key is not a lock anybody holds: the acquire fails at once
/// with an error that names the key and its type, on every path; never `Contended` after the
/// whole wait budget.
#[tokio::test(flavor = "current_thread")]
async fn a_key_of_another_type_is_an_error_at_once_not_contended() {
    let (_server, locks, mut raw) = start_with_manager().await;
    let _: () = query(&mut raw, &cmd(&["RPUSH", &full("order:99"), "a", "b"])).await;
    let _: () = query(&mut raw, &cmd(&["HSET", &full("order:98"), "f", "v"])).await;
    let budget = LockOptions::new(Duration::from_secs(5)).wait(Duration::from_secs(3));
    for (key, kind) in [("order:99", "list"), ("order:98", "hash")] {
        for wait in [Duration::from_secs(3), Duration::ZERO] {
            let started = Instant::now();
            let err = locks
                .acquire(key, &budget.clone().wait(wait))
                .await
                .err()
                .unwrap_or_else(|| panic!("{key}: a {kind} is not a lock"));
            let message = err.to_string();
            assert!(
                matches!(&err, LockError::NotALock { key: k, found } if *k == full(key) && found == kind),
                "{key}: expected NotALock naming the key and `{kind}`, got {err:?} ({message})"
            );
            assert!(
                message.contains(&full(key)) && message.contains(kind),
                "{message}"
            );
            assert!(
                started.elapsed() < Duration::from_secs(1),
                "{key}: the error comes at once, not after the wait budget ({:?})",
                started.elapsed()
            );
        }
        let err = locks
            .try_acquire(key, &budget)
            .await
            .err()
            .unwrap_or_else(|| panic!("{key}: try_acquire of a {kind}"));
        assert!(matches!(err, LockError::NotALock { .. }), "{err:?}");
        let err = locks
            .acquire_many([key, "order:free"], &budget)
            .await
            .err()
            .unwrap_or_else(|| panic!("{key}: acquire_many with a {kind}"));
        assert!(matches!(err, LockError::NotALock { .. }), "{err:?}");
    }
    // The foreign keys are untouched, and nothing is left behind.
    let len: i64 = query(&mut raw, &cmd(&["LLEN", &full("order:99")])).await;
    assert_eq!(len, 2);
    assert!(!exists(&mut raw, &full("order:free")).await);
    assert!(queue_leftovers(&mut raw).await.is_empty());
}

/// A string value written by another client is a lock another holder has: contended, as
/// before (the twin of the test above).
#[tokio::test(flavor = "current_thread")]
async fn a_foreign_string_value_is_still_contended() {
    let (_server, locks, mut raw) = start_with_manager().await;
    set_px(
        &mut raw,
        &full("order:97"),
        "python-redis-lock-token",
        60_000,
    )
    .await;
    let err = locks
        .acquire("order:97", &opts(5_000, 100))
        .await
        .err()
        .unwrap_or_else(|| panic!("the key is held"));
    assert!(err.is_contended(), "{err:?}");
}

/// Wall-clock milliseconds since the Unix epoch.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The lock value's `acquired_at` of a lock handed over after a long wait is the time of the
/// grant, not the time the waiter started waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_over_lock_is_held_from_its_grant() {
    let (_server, locks, mut raw) = start_with_manager().await;
    let holder = must_acquire(&locks, "held", &opts(10_000, 0)).await;
    let waiting = {
        let locks = locks.clone();
        tokio::spawn(async move { locks.acquire("held", &opts(10_000, 5_000)).await })
    };
    wait_queue_len(&mut raw, 1).await;
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let released_at = now_ms();
    assert!(holder.release().await.is_ok());
    let handed = waiting
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|e| panic!("handed over: {e}"));
    let value = get(&mut raw, &full("held")).await.unwrap_or_default();
    assert_eq!(
        value,
        handed.stored_value(),
        "the guard knows the stored value"
    );
    let meta: serde_json::Value =
        serde_json::from_str(value.split_once(' ').map_or("", |(_, m)| m)).unwrap_or_default();
    let acquired_at = meta["acquired_at"].as_u64().unwrap_or(0);
    assert!(
        acquired_at + 200 >= released_at,
        "acquired_at {acquired_at} is {} ms before the release that granted it",
        released_at.saturating_sub(acquired_at)
    );
    assert!(handed.release().await.is_ok());
}

/// One slow client (a proxy adds `one_way` to each direction, `response_timeout` 3 s) among
/// three fast ones that loop on the key with 30 ms holds. It must be served within its 6 s
/// budget.
async fn slow_waiter_among_fast_loopers(one_way: Duration) -> Result<Duration, LockError> {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(&server).await;
    let slow = LockManager::builder()
        .url(proxy.url())
        .response_timeout(Duration::from_secs(3))
        .connection_timeout(Duration::from_secs(3))
        .build()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    proxy.set_latency(Direction::Requests, one_way);
    proxy.set_latency(Direction::Replies, one_way);
    let stop = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicUsize::new(0));
    let mut loopers = Vec::new();
    for _ in 0..3 {
        let fast = manager(&server).await;
        let (stop, rounds) = (Arc::clone(&stop), Arc::clone(&rounds));
        loopers.push(tokio::spawn(async move {
            // Bounded: the test stops the loop within its 6 s budget (+ one round).
            for _ in 0..10_000 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                if let Ok(guard) = fast.acquire("hot", &opts(5_000, 8_000)).await {
                    tokio::time::sleep(Duration::from_millis(30)).await;
                    let _ = guard.release().await;
                    rounds.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    // The fast clients are looping before the slow one arrives.
    let warm = Instant::now();
    while rounds.load(Ordering::Relaxed) < 10 {
        assert!(
            warm.elapsed() < Duration::from_secs(5),
            "the fast clients loop"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let started = Instant::now();
    let outcome = match slow.acquire("hot", &opts(5_000, 6_000)).await {
        Ok(guard) => {
            let took = started.elapsed();
            let _ = guard.release().await;
            Ok(took)
        }
        Err(e) => Err(e),
    };
    stop.store(true, Ordering::Relaxed);
    for looper in loopers {
        let _ = looper.await;
    }
    let served = rounds.load(Ordering::Relaxed);
    assert!(
        served > 10,
        "the fast clients kept looping ({served} rounds)"
    );
    outcome
}

/// A client whose round trip is 600 ms (within its 3 s response timeout) is served in FIFO
/// order among fast contenders: its grant's push arrives late, and its waiter entry is
/// refreshed less often, and neither may cost it its turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_with_a_slow_link_is_served() {
    let took = slow_waiter_among_fast_loopers(Duration::from_millis(300))
        .await
        .unwrap_or_else(|e| panic!("the slow waiter was starved: {e:?}"));
    assert!(took < Duration::from_secs(6), "{took:?}");
}

/// The twin at 0 ms: the same set-up serves a waiter on a fast link (the loopers leave room).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_with_a_fast_link_is_served() {
    let took = slow_waiter_among_fast_loopers(Duration::ZERO)
        .await
        .unwrap_or_else(|e| panic!("the waiter was starved: {e:?}"));
    assert!(took < Duration::from_secs(6), "{took:?}");
}
