//! `#[distributed_lock(permits = N)]` and `#[distributed_lock(mode = "read" | "write")]` against
//! a real Redis: never more than N bodies at once (and the unlocked twin that runs more),
//! readers' bodies together, a writer's body alone, `on_contended = "skip"` and `guard` on a
//! permit, and the watchdog keeping a permit past its TTL.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lockcore::{LockError, LockGuard, LockManager, distributed_lock};
use lockcore_tests::*;
use tokio::time::sleep;

#[derive(Debug, thiserror::Error)]
enum AppError {
    #[error(transparent)]
    Lock(#[from] LockError),
}

/// Who is inside, and the most that were inside at once.
#[derive(Default)]
struct Inside {
    now: AtomicUsize,
    most: AtomicUsize,
}

impl Inside {
    async fn stay(&self, ms: u64) {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        sleep(Duration::from_millis(ms)).await;
        self.now.fetch_sub(1, Ordering::SeqCst);
    }

    fn most(&self) -> usize {
        self.most.load(Ordering::SeqCst)
    }
}

#[distributed_lock(key = "processor", permits = 2, manager = m, wait_ms = 10_000, guard = permit)]
async fn charge(m: &LockManager, inside: &Inside) -> Result<u64, AppError> {
    let permit: &LockGuard = permit;
    inside.stay(20).await;
    Ok(permit.fencing_token())
}

async fn charge_unlocked(inside: &Inside) -> Result<u64, AppError> {
    inside.stay(20).await;
    Ok(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn permits_let_at_most_n_bodies_in_at_once() {
    let (_server, locks, _raw) = start_with_manager().await;
    let inside = Arc::new(Inside::default());
    let calls = (0..6).map(|_| {
        let (locks, inside) = (locks.clone(), inside.clone());
        tokio::spawn(async move { charge(&locks, &inside).await.unwrap() })
    });
    let tokens = futures_util::future::join_all(calls).await;
    assert_eq!(inside.most(), 2, "two bodies at once, never three");
    assert!(
        tokens.iter().all(|t| *t.as_ref().unwrap() > 0),
        "a fencing token per permit"
    );
}

/// Twin: the same body without the attribute runs all six at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unlocked_twin_runs_every_body_at_once() {
    let inside = Arc::new(Inside::default());
    let calls = (0..6).map(|_| {
        let inside = inside.clone();
        tokio::spawn(async move { charge_unlocked(&inside).await.unwrap() })
    });
    futures_util::future::join_all(calls).await;
    assert_eq!(inside.most(), 6);
}

#[distributed_lock(key = "prices", mode = "read", manager = m, wait_ms = 10_000)]
async fn read_prices(
    m: &LockManager,
    inside: &Inside,
    writers: &Inside,
) -> Result<usize, AppError> {
    inside.stay(30).await;
    Ok(writers.now.load(Ordering::SeqCst))
}

#[distributed_lock(key = "prices", mode = "write", manager = m, wait_ms = 10_000)]
async fn write_prices(
    m: &LockManager,
    inside: &Inside,
    readers: &Inside,
) -> Result<usize, AppError> {
    let readers_in = readers.now.load(Ordering::SeqCst);
    inside.stay(10).await;
    Ok(readers_in)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn read_bodies_run_together_and_a_write_body_alone() {
    let (_server, locks, _raw) = start_with_manager().await;
    let (readers, writers) = (Arc::new(Inside::default()), Arc::new(Inside::default()));
    let mut calls = Vec::new();
    for i in 0..8 {
        let (locks, readers, writers) = (locks.clone(), readers.clone(), writers.clone());
        calls.push(tokio::spawn(async move {
            if i % 4 == 3 {
                write_prices(&locks, &writers, &readers).await.unwrap()
            } else {
                read_prices(&locks, &readers, &writers).await.unwrap()
            }
        }));
    }
    for call in calls {
        assert_eq!(
            call.await.unwrap(),
            0,
            "a writer and a reader were inside together"
        );
    }
    assert!(readers.most() > 1, "readers ran together");
    assert_eq!(writers.most(), 1);
}

#[distributed_lock(key = "processor", permits = 2, manager = m, wait_ms = 0, on_contended = "skip")]
async fn maybe_charge(m: &LockManager, ran: &AtomicUsize) -> Result<(), AppError> {
    ran.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skip_when_every_permit_is_taken() {
    let (_server, locks, _raw) = start_with_manager().await;
    let ran = AtomicUsize::new(0);
    let sem = locks.semaphore("processor", 2);
    let a = sem.acquire(&opts(10_000, 0)).await.unwrap();
    maybe_charge(&locks, &ran).await.unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), 1, "one permit was free");
    let b = sem.acquire(&opts(10_000, 0)).await.unwrap();
    maybe_charge(&locks, &ran).await.unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), 1, "skipped: both permits taken");
    a.release().await.unwrap();
    b.release().await.unwrap();
}

#[distributed_lock(key = "processor", permits = 3, manager = m, ttl_ms = 300, guard = permit)]
async fn long_charge(m: &LockManager) -> Result<bool, AppError> {
    sleep(Duration::from_millis(900)).await;
    Ok(permit.is_held())
}

/// The attribute's watchdog (on by default) renews the permit past its 300 ms TTL, and the
/// permit is released after the body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_keeps_a_permit_past_its_ttl() {
    let (_server, locks, _raw) = start_with_manager().await;
    let sem = locks.semaphore("processor", 3);
    let body = tokio::spawn({
        let locks = locks.clone();
        async move { long_charge(&locks).await.unwrap() }
    });
    sleep(Duration::from_millis(700)).await;
    assert_eq!(sem.available().await.unwrap(), 2, "still held past its TTL");
    assert!(body.await.unwrap(), "held to the end of the body");
    assert_eq!(sem.available().await.unwrap(), 3, "released after the body");
}
