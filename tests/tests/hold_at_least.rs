//! `LockOptions::hold_at_least` (ShedLock's lockAtLeastFor): a release keeps the key until the
//! minimum after the acquire, measured by Redis, and never past the TTL; a job fired late by
//! another instance within the minimum is skipped, and its twin without the minimum runs twice.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use lockcore::{LockError, LockManager, LockOptions};
use lockcore_tests::*;
use tokio::time::Instant;

fn job(ttl_ms: u64, hold_ms: Option<u64>) -> LockOptions {
    let opts = LockOptions::new(Duration::from_millis(ttl_ms)).wait(Duration::ZERO);
    match hold_ms {
        Some(ms) => opts.hold_at_least(Duration::from_millis(ms)),
        None => opts,
    }
}

#[tokio::test]
async fn the_key_is_kept_for_the_minimum_and_no_longer_than_the_ttl() {
    let (_server, locks, mut raw) = start_with_manager().await;
    let key = full("job:kept");
    let started = Instant::now();
    let guard = locks
        .try_acquire("job:kept", &job(5_000, Some(1_500)))
        .await
        .unwrap()
        .expect("free key");
    let token = guard.token().to_owned();
    guard.release().await.unwrap();
    // Kept, still holding the released token, with what is left of the minimum as its TTL.
    let value = get(&mut raw, &key).await.expect("kept after release");
    assert!(value.starts_with(&token), "{value}");
    let pttl = pttl(&mut raw, &key).await;
    assert!((1_000..=1_500).contains(&pttl), "pttl {pttl} after release");
    // Gone once the minimum has passed: not before it, and not at the TTL (5 s).
    let gone = gone_within(
        &mut raw,
        &key,
        Duration::from_secs(3),
        Duration::from_millis(10),
    )
    .await
    .map(|_| started.elapsed())
    .expect("gone after the minimum");
    assert!(
        gone >= Duration::from_millis(1_450) && gone < Duration::from_millis(2_500),
        "gone {gone:?} after the acquire"
    );
    // The twin without the minimum: the release deletes at once.
    let guard = locks
        .try_acquire("job:kept", &job(5_000, None))
        .await
        .unwrap()
        .expect("free again");
    guard.release().await.unwrap();
    assert!(!exists(&mut raw, &key).await, "deleted without a minimum");
}

#[tokio::test]
async fn the_ttl_stays_the_upper_bound() {
    let (_server, locks, mut raw) = start_with_manager().await;
    let key = full("job:bounded");
    let mut guard = locks
        .try_acquire("job:bounded", &job(3_000, Some(3_000)))
        .await
        .unwrap()
        .expect("free key");
    // The lease was cut to 400 ms: the release does not lengthen it to the minimum.
    guard.extend(Duration::from_millis(400)).await.unwrap();
    guard.release().await.unwrap();
    let pttl = pttl(&mut raw, &key).await;
    assert!((1..=400).contains(&pttl), "pttl {pttl}");
    assert_gone_within(&mut raw, &key, Duration::from_millis(600)).await;
}

#[tokio::test]
async fn a_minimum_that_has_passed_deletes_at_once() {
    let (_server, locks, mut raw) = start_with_manager().await;
    let key = full("job:short");
    let guard = locks
        .try_acquire("job:short", &job(5_000, Some(100)))
        .await
        .unwrap()
        .expect("free key");
    let kept_while = pttl(&mut raw, &key).await;
    assert!(
        kept_while > 4_000,
        "the lease runs on its ttl: {kept_while}"
    );
    tokio::time::sleep(Duration::from_millis(150)).await; // the job's own run time
    guard.release().await.unwrap();
    assert!(!exists(&mut raw, &key).await, "the minimum had passed");
}

/// Instance A runs the job (50 ms) and releases; instance B's schedule fires 100 ms after A
/// finished (clock skew, a slow start). With a 1 s minimum B finds the lock held and skips;
/// without it (the twin) B runs the job a second time.
async fn runs_of_a_late_job(server: &RedisServer, hold_ms: Option<u64>, key: &str) -> u32 {
    let a = manager(server).await;
    let b = manager(server).await;
    let runs = AtomicU32::new(0);
    async fn fire(locks: &LockManager, key: &str, opts: &LockOptions, runs: &AtomicU32) {
        if let Some(guard) = locks.try_acquire(key, opts).await.unwrap() {
            runs.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(50)).await; // the job
            guard.release().await.unwrap();
        }
    }
    let opts = job(10_000, hold_ms);
    fire(&a, key, &opts, &runs).await;
    tokio::time::sleep(Duration::from_millis(100)).await; // B's schedule is late
    fire(&b, key, &opts, &runs).await;
    runs.load(Ordering::SeqCst)
}

#[tokio::test]
async fn a_job_fired_late_within_the_minimum_is_skipped() {
    let server = RedisServer::start();
    assert_eq!(
        runs_of_a_late_job(&server, Some(1_000), "job:late").await,
        1
    );
}

#[tokio::test]
async fn without_the_minimum_the_late_job_runs_twice() {
    let server = RedisServer::start();
    assert_eq!(runs_of_a_late_job(&server, None, "job:late-twin").await, 2);
}

#[tokio::test]
async fn a_dropped_guard_keeps_the_minimum_too() {
    let (_server, locks, mut raw) = start_with_manager().await;
    let key = full("job:dropped");
    let guard = locks
        .try_acquire("job:dropped", &job(5_000, Some(1_000)))
        .await
        .unwrap()
        .expect("free key");
    drop(guard); // a panicking or cancelled job body
    // The background release lands: the TTL falls from 5 s to what is left of the minimum.
    let cut = poll_reply_until(
        &mut raw,
        &cmd(&["PTTL", &key]),
        Duration::from_secs(1),
        "the background release to cut the ttl",
        |reply| {
            reply
                .parse::<i64>()
                .is_ok_and(|ms| (1..=1_000).contains(&ms))
        },
    )
    .await;
    assert!(!cut.is_empty());
}

#[tokio::test]
async fn a_queued_waiter_gets_the_key_once_the_minimum_is_over() {
    let (_server, locks, _raw) = start_with_manager().await;
    let holder = locks
        .acquire("job:queued", &job(5_000, Some(800)))
        .await
        .unwrap();
    let started = Instant::now();
    let waiter = {
        let locks = locks.clone();
        tokio::spawn(async move {
            let opts = LockOptions::new(Duration::from_secs(5)).wait(Duration::from_secs(3));
            let guard = locks.acquire("job:queued", &opts).await.unwrap();
            let at = started.elapsed();
            guard.release().await.unwrap();
            at
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await; // the waiter queues meanwhile
    holder.release().await.unwrap();
    let at = waiter.await.unwrap();
    assert!(
        at >= Duration::from_millis(700) && at < Duration::from_millis(1_500),
        "the waiter got the key {at:?} after the holder's acquire"
    );
}

#[tokio::test]
async fn a_minimum_above_the_ttl_is_invalid_before_any_network_call() {
    let (_server, locks, _raw) = start_with_manager().await;
    let opts = LockOptions::new(Duration::from_secs(1)).hold_at_least(Duration::from_secs(2));
    for result in [
        locks.try_acquire("job:bad", &opts).await.map(|_| ()),
        locks.acquire("job:bad", &opts).await.map(|_| ()),
    ] {
        match result {
            Err(LockError::InvalidOptions { reason }) => {
                assert!(reason.starts_with("hold_at_least"), "{reason}")
            }
            other => panic!("expected InvalidOptions, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn redlock_keeps_the_minimum_on_every_node() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let locks = LockManager::builder()
        .nodes(servers.iter().map(RedisServer::url))
        .build()
        .await
        .unwrap();
    let guard = locks
        .try_acquire("job:redlock", &job(5_000, Some(1_200)))
        .await
        .unwrap()
        .expect("free key");
    guard.release().await.unwrap();
    // Every node that took the key keeps it for the minimum; a quorum took it (a node that
    // answered too late on a loaded machine never had it).
    let mut kept = 0;
    for server in &servers {
        let mut raw = server.connection().await;
        let pttl = pttl(&mut raw, &full("job:redlock")).await;
        assert!(
            pttl == -2 || (700..=1_200).contains(&pttl),
            "pttl {pttl} on {}",
            server.url()
        );
        kept += usize::from(pttl > 0);
    }
    assert!(kept >= 2, "a quorum keeps the minimum: {kept} of 3");
    let late = locks
        .try_acquire("job:redlock", &job(5_000, Some(1_200)))
        .await
        .unwrap();
    assert!(late.is_none(), "skipped within the minimum");
}

/// The attribute's job lock: `wait_ms = 0, on_contended = "skip", hold_at_least_ms`.
#[lockcore::distributed_lock(
    key = "job:<name>",
    manager = locks,
    ttl_ms = 10_000,
    wait_ms = 0,
    on_contended = "skip",
    hold_at_least_ms = 1_000
)]
async fn report(locks: &LockManager, name: &str, runs: &AtomicU32) -> Result<(), LockError> {
    runs.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[tokio::test]
async fn the_attribute_skips_a_job_fired_within_its_minimum() {
    let server = RedisServer::start();
    let (a, b) = (manager(&server).await, manager(&server).await);
    let runs = AtomicU32::new(0);
    report(&a, "daily", &runs).await.unwrap();
    report(&b, "daily", &runs).await.unwrap(); // another instance, fired late
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let mut raw = server.connection().await;
    let pttl = pttl(&mut raw, &full("job:daily")).await;
    assert!(
        (1..=1_000).contains(&pttl),
        "kept for the minimum: pttl {pttl}"
    );
}

/// How a handed-over job lock ends.
#[derive(Debug, Clone, Copy)]
enum End {
    Release,
    /// A panicking or cancelled job body.
    Drop,
    /// The manager's `close` (a shutdown while the job runs).
    Close,
}

/// A job lock handed over by the queue (its key still lives the claim window) and ended at
/// once by `end` keeps the key for its minimum after the grant, as a directly acquired one
/// does. Twin: without the minimum the key is gone at once.
async fn a_handed_over_job_lock_keeps_its_minimum(end: End) {
    let server = RedisServer::start();
    let locks = manager(&server).await;
    let mut raw = server.connection().await;
    let key = full("job:handed");
    for hold_ms in [Some(2_000), None] {
        let holder = locks
            .acquire("job:handed", &job(5_000, None))
            .await
            .unwrap();
        let waiting = manager(&server).await;
        let waiter = {
            let waiting = waiting.clone();
            tokio::spawn(async move {
                let opts = job(5_000, hold_ms).wait(Duration::from_secs(3));
                let guard = waiting.acquire("job:handed", &opts).await.unwrap();
                let granted = Instant::now();
                match end {
                    End::Release => guard.release().await.unwrap(),
                    End::Drop => drop(guard),
                    End::Close => {
                        waiting.close().await.unwrap();
                        drop(guard);
                    }
                }
                granted
            })
        };
        wait_queue_len(&mut raw, 1).await;
        holder.release().await.unwrap();
        let granted = waiter.await.unwrap();
        let gone = gone_within(
            &mut raw,
            &key,
            Duration::from_secs(3),
            Duration::from_millis(10),
        )
        .await
        .map(|_| granted.elapsed());
        match hold_ms {
            Some(_) => assert!(
                gone.is_some_and(|g| g >= Duration::from_millis(1_700)),
                "{end:?}: the handed-over job lock was kept only {gone:?} of its 2 s minimum"
            ),
            None => assert!(
                gone.is_some_and(|g| g < Duration::from_millis(400)),
                "{end:?}: without a minimum the key is deleted at once: {gone:?}"
            ),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_over_job_lock_keeps_its_minimum_when_released() {
    a_handed_over_job_lock_keeps_its_minimum(End::Release).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_over_job_lock_keeps_its_minimum_when_dropped() {
    a_handed_over_job_lock_keeps_its_minimum(End::Drop).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_over_job_lock_keeps_its_minimum_when_closed() {
    a_handed_over_job_lock_keeps_its_minimum(End::Close).await;
}

/// A job lock of three seconds' minimum, on its own key per `name`.
#[lockcore::distributed_lock(
    key = "job:reentry:<name>",
    manager = locks,
    ttl_ms = 10_000,
    wait_ms = 0,
    hold_at_least_ms = 3_000
)]
async fn minimum_job(locks: &LockManager, name: &str, runs: &AtomicU32) -> Result<(), LockError> {
    runs.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// A plain lock on the same key around the job.
#[lockcore::distributed_lock(key = "job:reentry:<name>", manager = locks, ttl_ms = 10_000, wait_ms = 0)]
async fn plain_around_job(
    locks: &LockManager,
    name: &str,
    runs: &AtomicU32,
) -> Result<(), LockError> {
    minimum_job(locks, name, runs).await
}

/// A job lock nested in a plain lock of the same task on the same key would re-enter, and a
/// re-entry makes no acquire for its minimum to count from: it is refused with
/// `InvalidOptions` naming the key and the minimum, and its body never runs (its minimum is
/// never silently dropped). Twin: the same job alone runs and keeps its key for the minimum.
#[tokio::test]
async fn a_job_lock_nested_in_a_plain_lock_is_refused_not_stripped_of_its_minimum() {
    let (_server, locks, mut raw) = start_with_manager().await;
    let runs = AtomicU32::new(0);
    minimum_job(&locks, "alone", &runs).await.unwrap();
    let kept = pttl(&mut raw, &full("job:reentry:alone")).await;
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert!(
        kept > 2_000,
        "control: the job alone keeps its minimum: pttl {kept}"
    );

    let runs = AtomicU32::new(0);
    let nested = plain_around_job(&locks, "nested", &runs).await;
    let left = pttl(&mut raw, &full("job:reentry:nested")).await;
    match nested {
        Err(LockError::InvalidOptions { reason }) => assert!(
            reason.contains("lock:job:reentry:nested")
                && reason.contains("hold_at_least_ms = 3000"),
            "the reason names the key and the minimum: {reason}"
        ),
        other => panic!(
            "a nested job lock must be refused, got {other:?}; its body ran {} times, pttl after {left}",
            runs.load(Ordering::SeqCst)
        ),
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the nested job never runs");
    assert_eq!(left, -2, "the plain lock released its key");
}
