//! Contention: the lock makes a non-atomic read-modify-write exact (and its unlocked twin loses
//! updates), one holder at a time, and the wait budget is honoured.

// Test helpers outside `#[test]` fns may panic on failure too (clippy's allow-*-in-tests
// covers only the test fns themselves).
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use lockcore::{LockError, LockManager, LockOptions};
use lockcore_tests::*;
use tokio::sync::Barrier;
use tokio::time::Instant;

const TASKS: usize = 5;
const ROUNDS: usize = 20;

/// Runs `TASKS` x `ROUNDS` increments, each task on its own connection (and, when `locks` is
/// given, alternating between two independent lock clients). Returns the final counter.
async fn run_increments(server: &RedisServer, locks: Option<[LockManager; 2]>) -> i64 {
    let barrier = Arc::new(Barrier::new(TASKS));
    let opts = LockOptions::new(Duration::from_secs(5))
        .wait(Duration::from_secs(20))
        .retry_base(Duration::from_millis(1))
        .retry_cap(Duration::from_millis(8));
    let mut tasks = Vec::new();
    for i in 0..TASKS {
        let mut con = server.connection().await;
        let barrier = Arc::clone(&barrier);
        let lock = locks.as_ref().map(|l| l[i % 2].clone());
        let opts = opts.clone();
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            for _ in 0..ROUNDS {
                match &lock {
                    Some(m) => {
                        let guard = m.acquire("counter", &opts).await.expect("acquire");
                        non_atomic_increment(&mut con).await;
                        guard.release().await.expect("release within the lease");
                    }
                    None => non_atomic_increment(&mut con).await,
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("increment task");
    }
    counter_value(server).await
}

/// Under the lock, 5 tasks x 20 non-atomic increments give exactly 100.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contention_locked_increments_are_exact() {
    let server = RedisServer::start();
    let locks = [manager(&server).await, manager(&server).await];
    let started = Instant::now();
    let total = run_increments(&server, Some(locks)).await;
    assert_eq!(
        total,
        (TASKS * ROUNDS) as i64,
        "the lock must serialise the increments"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// Unlocked twin: the same increments without the lock lose updates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contention_unlocked_twin_loses_updates() {
    let server = RedisServer::start();
    let total = run_increments(&server, None).await;
    assert!(
        total < (TASKS * ROUNDS) as i64,
        "without the lock interleaved GET/SET must lose updates, got {total}"
    );
    assert!(total >= ROUNDS as i64);
}

/// One holder at a time: B's single attempt fails while A holds, succeeds after A releases.
#[tokio::test]
async fn contention_try_acquire_excludes_until_release() {
    let server = RedisServer::start();
    let (a, b) = (manager(&server).await, manager(&server).await);
    let o = opts(5000, 0);

    let guard_a = a
        .try_acquire("one", &o)
        .await
        .expect("A")
        .expect("free key");
    assert!(b.try_acquire("one", &o).await.expect("B").is_none());
    assert!(
        a.try_acquire("one", &o).await.expect("A again").is_none(),
        "no re-entry"
    );
    guard_a.release().await.expect("A releases");
    let guard_b = b
        .try_acquire("one", &o)
        .await
        .expect("B")
        .expect("released key");
    guard_b.release().await.expect("B releases");
}

/// The wait budget is honoured: `Contended` after ~wait (not before, not much after), with
/// `waited` reported; wait 0 is one attempt. With the default hand-off.
#[tokio::test]
async fn contention_wait_budget_is_honoured() {
    wait_budget_is_honoured(true).await;
}

/// As above, with `handoff(false)`: plain jittered backoff.
#[tokio::test]
async fn contention_wait_budget_is_honoured_with_backoff() {
    wait_budget_is_honoured(false).await;
}

async fn wait_budget_is_honoured(handoff: bool) {
    let server = RedisServer::start();
    let (a, b) = (manager(&server).await, manager(&server).await);
    let held = must_acquire(&a, "busy", &opts(10_000, 0)).await;

    let (err, elapsed) = timed_failure(
        b.acquire("busy", &opts(5000, 300).handoff(handoff)),
        "held by A",
    )
    .await;
    match &err {
        LockError::Contended { key, waited } => {
            assert_eq!(key, "lock:busy");
            assert!(*waited >= Duration::from_millis(300), "waited {waited:?}");
            assert!(*waited < Duration::from_millis(450), "waited {waited:?}");
        }
        other => panic!("expected Contended, got {other:?}"),
    }
    assert!(err.is_contended() && !err.is_lost() && !err.is_redis());
    assert!(elapsed < Duration::from_millis(450), "took {elapsed:?}");

    // wait 0 is exactly one attempt: one script call reaches Redis.
    let mut raw = server.connection().await;
    let _: () = query(&mut raw, redis::cmd("CONFIG").arg("RESETSTAT")).await;
    let (err, elapsed) = timed_failure(
        b.acquire("busy", &opts(5000, 0).handoff(handoff)),
        "held by A",
    )
    .await;
    assert!(err.is_contended(), "got {err:?}");
    assert!(elapsed < Duration::from_millis(200), "wait 0 does not wait");
    let stats: String = query(&mut raw, redis::cmd("INFO").arg("commandstats")).await;
    let (_, per_command) = parse_commandstats(&stats);
    let script_calls: u64 = ["evalsha", "eval"]
        .iter()
        .filter_map(|name| per_command.get(*name))
        .sum();
    assert_eq!(
        script_calls, 1,
        "wait 0 must make exactly one attempt:\n{stats}"
    );
    held.release().await.expect("release");
}

/// A waiter gets the lock soon after the holder's lease expires (it sleeps no longer than the
/// holder's PTTL, though its backoff would sleep 1-2 s), well inside its budget. With the
/// default hand-off.
#[tokio::test]
async fn contention_waiter_wakes_when_lease_expires() {
    waiter_wakes_when_lease_expires(true).await;
}

/// As above, with `handoff(false)`: the backoff sleep is cut to the holder's PTTL.
#[tokio::test]
async fn contention_waiter_wakes_when_lease_expires_with_backoff() {
    waiter_wakes_when_lease_expires(false).await;
}

async fn waiter_wakes_when_lease_expires(handoff: bool) {
    let server = RedisServer::start();
    let (a, b) = (manager(&server).await, manager(&server).await);
    let held = must_acquire(&a, "handoff", &opts(300, 0)).await;
    let started = Instant::now();
    let guard = b
        .acquire(
            "handoff",
            &opts(5000, 3000)
                .retry_base(Duration::from_secs(1))
                .retry_cap(Duration::from_secs(2))
                .handoff(handoff),
        )
        .await
        .expect("A's lease ends at 300 ms");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_millis(600),
        "expected the hand-off right after A's 300 ms lease, took {took:?}"
    );
    assert!(held.release().await.is_err_and(|e| e.is_lost()));
    guard.release().await.expect("release");
}
