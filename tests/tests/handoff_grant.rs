//! Direct grant: the release hands the lock to the first live waiter and the woken
//! waiter starts at once, on a claim-window lease that its first renewal promotes to the full
//! TTL. Single node; every test runs its own `redis-server`.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use lockcore::{LockError, LockGuard, LockManager, LockOptions};
use lockcore_tests::*;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep};

const KEY: &str = "grant";

fn spawn_acquire(m: &LockManager, o: &LockOptions) -> JoinHandle<Result<LockGuard, LockError>> {
    let (m, o) = (m.clone(), o.clone());
    tokio::spawn(async move { m.acquire(KEY, &o).await })
}

/// A holder on [`KEY`], a waiter queued behind it (its first attempt has run), and the script
/// call count reset right after: returns the holder's guard and the waiter's task.
async fn holder_and_queued_waiter(
    server: &RedisServer,
    waiter_opts: &LockOptions,
) -> (LockGuard, JoinHandle<Result<LockGuard, LockError>>) {
    let mut raw = server.connection().await;
    let holder = manager(server).await;
    let waiter = manager(server).await;
    let guard = must_acquire(&holder, KEY, &opts(10_000, 0)).await;
    let task = spawn_acquire(&waiter, waiter_opts);
    wait_queue_len(&mut raw, 1).await;
    reset_stats(&mut raw).await;
    (guard, task)
}

/// The hand-off costs one script call in all: the release's. The woken waiter sends nothing
/// before its `acquire` returns. Twin: a `handoff(false)` waiter needs attempts of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_over_waiter_starts_without_a_round_trip() {
    let server = RedisServer::start();
    let mut raw = server.connection().await;
    let (guard, task) = holder_and_queued_waiter(&server, &opts(10_000, 5_000)).await;
    let first = guard.fencing_token();
    guard.release().await.expect("release");
    let handed = task.await.expect("task").expect("handed over");
    let calls = script_calls(&mut raw).await;
    assert_eq!(
        calls, 1,
        "only the release ran a script; the waiter sent nothing"
    );
    assert!(
        handed.fencing_token() > first,
        "the release minted the next token"
    );
    assert_eq!(
        get(&mut raw, &full(KEY)).await.as_deref(),
        Some(handed.stored_value()),
        "the key holds the new holder's value"
    );
    assert!(
        handed.remaining() <= Duration::from_secs(1),
        "the lease starts on the claim window (500 ms and twice the round trip), not the 10 s \
         ttl: {:?}",
        handed.remaining()
    );
    handed.release().await.expect("release");

    // Twin: polling, the waiter's own attempt takes the freed key.
    let holder = manager(&server).await;
    let poller = manager(&server).await;
    let guard = must_acquire(&holder, KEY, &opts(10_000, 0)).await;
    let polling = opts(10_000, 5_000)
        .handoff(false)
        .retry_base(Duration::from_millis(5))
        .retry_cap(Duration::from_millis(20));
    let before = script_calls(&mut raw).await;
    let task = spawn_acquire(&poller, &polling);
    wait_script_calls_above(&mut raw, before).await;
    reset_stats(&mut raw).await;
    guard.release().await.expect("release");
    let got = task.await.expect("task").expect("the poller takes the key");
    let calls = script_calls(&mut raw).await;
    assert!(
        calls >= 2,
        "the release and the poller's own attempt: {calls}"
    );
    got.release().await.expect("release");
}

/// A handed-over lease is promoted to its full ttl a third of the way into the claim window:
/// its deadline moves past the claim window and Redis holds about the full ttl. Twin: a body
/// that ends before that sends no renewal at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_over_lease_is_promoted_to_its_full_ttl() {
    let server = RedisServer::start();
    let mut raw = server.connection().await;
    let (guard, task) = holder_and_queued_waiter(&server, &opts(10_000, 5_000)).await;
    guard.release().await.expect("release");
    let handed = task.await.expect("task").expect("handed over");
    let claimed_deadline = handed.deadline();
    let by = Instant::now() + Duration::from_secs(2);
    while handed.deadline() == claimed_deadline {
        assert!(Instant::now() < by, "the lease was never promoted");
        sleep(Duration::from_millis(5)).await;
    }
    assert!(
        handed.remaining() > Duration::from_secs(9),
        "{:?}",
        handed.remaining()
    );
    let ttl = pttl(&mut raw, &full(KEY)).await;
    assert!(
        ttl > 9_000,
        "Redis holds the full ttl after the promotion: {ttl} ms"
    );
    assert!(handed.is_held());
    handed.release().await.expect("release");

    // Twin: released at once, the lease is never promoted (one script call: the release).
    let (guard, task) = holder_and_queued_waiter(&server, &opts(10_000, 5_000)).await;
    guard.release().await.expect("release");
    let handed = task.await.expect("task").expect("handed over");
    handed.release().await.expect("release");
    let before = script_calls(&mut raw).await;
    assert_eq!(before, 2, "two releases, no renewal");
    sleep(Duration::from_millis(300)).await;
    assert_eq!(
        script_calls(&mut raw).await,
        before,
        "no renewal after the release (checked past a third of the claim window)"
    );
}

/// With the watchdog, the watchdog promotes the handed-over lease (and keeps renewing it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_promotes_a_handed_over_lease() {
    let server = RedisServer::start();
    let mut raw = server.connection().await;
    let watched = opts(3_000, 5_000).watchdog(true);
    let (guard, task) = holder_and_queued_waiter(&server, &watched).await;
    guard.release().await.expect("release");
    let handed = task.await.expect("task").expect("handed over");
    // The guard records a renewal once its reply is in, after Redis applied it.
    let by = Instant::now() + Duration::from_secs(2);
    while handed.remaining() <= Duration::from_secs(1) {
        assert!(Instant::now() < by, "the watchdog never promoted the lease");
        sleep(Duration::from_millis(5)).await;
    }
    let ttl = pttl(&mut raw, &full(KEY)).await;
    assert!(ttl > 2_000, "Redis holds the full 3 s ttl: {ttl} ms");
    assert!(handed.is_held());
    handed.release().await.expect("release");
}

/// A waiter paused past its waiter key's lease (its whole runtime blocked for 900 ms) is
/// presumed dead; its next re-check queues it again once, at the back, behind a waiter that
/// kept refreshing: that one gets the lock first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_presumed_dead_queues_again_at_the_back() {
    let server = RedisServer::start();
    let mut raw = server.connection().await;
    let holder = manager(&server).await;
    let guard = must_acquire(&holder, KEY, &opts(10_000, 0)).await;
    // The paused waiter, on a current-thread runtime of its own thread.
    let url = server.url();
    let (pause_tx, pause_rx) = std::sync::mpsc::channel::<()>();
    let (token_tx, token_rx) = tokio::sync::oneshot::channel::<u64>();
    let paused = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async move {
            let m = LockManager::connect(&url).await.expect("connect");
            let task = tokio::spawn(async move { m.acquire(KEY, &opts(10_000, 10_000)).await });
            // Blocks this whole runtime, the waiter's refreshes with it, once told to.
            tokio::task::spawn_blocking(move || pause_rx.recv())
                .await
                .expect("join")
                .expect("told to pause");
            std::thread::sleep(Duration::from_millis(900));
            let guard = task
                .await
                .expect("task")
                .expect("the paused waiter gets it later");
            let _ = token_tx.send(guard.fencing_token());
            guard.release().await.expect("release");
        });
    });
    let (queue, waiter_prefix) = wait_queue_len(&mut raw, 1).await;
    let paused_value = lrange(&mut raw, &queue).await.remove(0);
    let patient = manager(&server).await;
    let patient_task = spawn_acquire(&patient, &opts(10_000, 10_000));
    wait_queue_len(&mut raw, 2).await;
    pause_tx.send(()).expect("pause");
    // Presumed dead once its waiter key lapses; back once its re-check queued it again.
    let by = Instant::now() + Duration::from_secs(3);
    while waiter_live(&mut raw, &waiter_prefix, &paused_value).await {
        assert!(Instant::now() < by, "the paused waiter's key never lapsed");
        sleep(Duration::from_millis(5)).await;
    }
    while !waiter_live(&mut raw, &waiter_prefix, &paused_value).await {
        assert!(Instant::now() < by, "the paused waiter never queued again");
        sleep(Duration::from_millis(5)).await;
    }
    let queued = lrange(&mut raw, &queue).await;
    assert_eq!(
        queued.iter().filter(|v| **v == paused_value).count(),
        1,
        "queued once: {queued:?}"
    );
    assert_eq!(
        queued.last(),
        Some(&paused_value),
        "at the back: {queued:?}"
    );
    guard.release().await.expect("release");
    let first = patient_task
        .await
        .expect("task")
        .expect("the patient waiter");
    let first_token = first.fencing_token();
    first.release().await.expect("release");
    let paused_token = token_rx.await.expect("the paused waiter acquired");
    paused.join().expect("thread");
    assert!(
        first_token < paused_token,
        "the waiter that kept its place went first ({first_token} < {paused_token})"
    );
}

/// A handed-over guard released right as its promotion is due (40 trials, ±4 ms around it):
/// every release is `Ok`. A promotion whose renewal lands after the release (and finds the key
/// handed on) must not turn the release into `Lost`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_racing_the_promotion_is_never_lost() {
    let server = RedisServer::start();
    let mut lost = 0;
    for trial in 0..40u32 {
        let (guard, task) = holder_and_queued_waiter(&server, &opts(10_000, 5_000)).await;
        // The next waiter, so that the release hands the key on.
        let next = manager(&server).await;
        let next_task = spawn_acquire(&next, &opts(10_000, 5_000));
        let mut raw = server.connection().await;
        wait_queue_len(&mut raw, 2).await;
        guard.release().await.expect("release");
        let handed = task.await.expect("task").expect("handed over");
        // Due a third of the way to the claim deadline (the claim window's validity, 500 ms −
        // 1 % − 2 ms, counted from the waiter's queued attempt).
        let due = handed.deadline() - Duration::from_millis(493) * 2 / 3;
        let offset = Duration::from_millis(u64::from(trial % 9));
        tokio::time::sleep_until(due + offset - Duration::from_millis(4)).await;
        if handed.release().await.is_err() {
            lost += 1;
        }
        let after = next_task.await.expect("task").expect("the next waiter");
        after.release().await.expect("release");
    }
    assert_eq!(
        lost, 0,
        "{lost} of 40 releases racing the promotion reported Lost"
    );
}
