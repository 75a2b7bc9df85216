//! The attribute's reentrancy matches the kind of hold: a nested call re-enters only a hold that
//! covers what it asks for (a read inside a write or plain lock, a read inside a read, a permit
//! inside a permit of the same count); a write or plain lock inside a share, or another permit
//! count, fails at once with `InvalidOptions` naming both kinds, and its body never runs,
//! never beside another client's share.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use lockcore::{LockError, LockManager, distributed_lock};
use lockcore_tests::*;

#[derive(Debug, thiserror::Error)]
enum AppError {
    #[error(transparent)]
    Lock(#[from] LockError),
}

/// The nested call an outer body makes on the same key.
#[derive(Debug, Clone, Copy)]
enum Inner {
    Write,
    Plain,
    Read,
    Permits3,
    Permits5,
}

#[distributed_lock(key = "prices", mode = "write", manager = m, wait_ms = 1_000)]
async fn inner_write(m: &LockManager, ran: &AtomicUsize) -> Result<(), AppError> {
    ran.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[distributed_lock(key = "prices", manager = m, wait_ms = 1_000)]
async fn inner_plain(m: &LockManager, ran: &AtomicUsize) -> Result<(), AppError> {
    ran.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

// A generous wait: a self-deadlock would wait it out and fail, never return `Ok`.
#[distributed_lock(key = "prices", mode = "read", manager = m, wait_ms = 5_000)]
async fn inner_read(m: &LockManager, ran: &AtomicUsize) -> Result<(), AppError> {
    ran.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[distributed_lock(key = "prices", permits = 3, manager = m, wait_ms = 5_000)]
async fn inner_permits3(m: &LockManager, ran: &AtomicUsize) -> Result<(), AppError> {
    ran.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[distributed_lock(key = "prices", permits = 5, manager = m, wait_ms = 1_000)]
async fn inner_permits5(m: &LockManager, ran: &AtomicUsize) -> Result<(), AppError> {
    ran.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

async fn inner(m: &LockManager, which: Inner, ran: &AtomicUsize) -> Result<(), AppError> {
    match which {
        Inner::Write => inner_write(m, ran).await,
        Inner::Plain => inner_plain(m, ran).await,
        Inner::Read => inner_read(m, ran).await,
        Inner::Permits3 => inner_permits3(m, ran).await,
        Inner::Permits5 => inner_permits5(m, ran).await,
    }
}

#[distributed_lock(key = "prices", mode = "read", manager = m, wait_ms = 5_000)]
async fn under_read(m: &LockManager, which: Inner, ran: &AtomicUsize) -> Result<(), AppError> {
    inner(m, which, ran).await
}

#[distributed_lock(key = "prices", mode = "write", manager = m, wait_ms = 5_000)]
async fn under_write(m: &LockManager, which: Inner, ran: &AtomicUsize) -> Result<(), AppError> {
    inner(m, which, ran).await
}

#[distributed_lock(key = "prices", manager = m, wait_ms = 5_000)]
async fn under_plain(m: &LockManager, which: Inner, ran: &AtomicUsize) -> Result<(), AppError> {
    inner(m, which, ran).await
}

#[distributed_lock(key = "prices", permits = 3, manager = m, wait_ms = 5_000)]
async fn under_permits3(
    m: &LockManager,
    which: Inner,
    ran: &AtomicUsize,
    available: &AtomicU32,
) -> Result<(), AppError> {
    let result = inner(m, which, ran).await;
    let free = m.semaphore("prices", 3).available().await?;
    available.store(free, Ordering::SeqCst);
    result
}

/// The refusal: `InvalidOptions` naming the enclosing hold and what the nested call asks for.
fn assert_refused(result: Result<(), AppError>, held: &str, asked: &str, ran: &AtomicUsize) {
    match result {
        Err(AppError::Lock(LockError::InvalidOptions { reason })) => {
            assert!(
                reason.contains(held) && reason.contains(asked),
                "the reason names both kinds ({held}, {asked}): {reason}"
            );
        }
        other => panic!(
            "a nested {asked} inside {held} must fail with InvalidOptions, got {other:?} (its body ran {} times)",
            ran.load(Ordering::SeqCst)
        ),
    }
    assert_eq!(ran.load(Ordering::SeqCst), 0, "the nested body never runs");
}

/// Another client holds a read share; a nested write (or plain lock) inside this task's read
/// must not run beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_inside_a_read_is_refused_while_another_reader_holds_a_share() {
    let (server, locks, mut raw) = start_with_manager().await;
    let other = manager(&server).await;
    let theirs = other
        .rw_lock("prices")
        .read(&opts(30_000, 0))
        .await
        .unwrap();
    for (which, asked) in [(Inner::Write, "exclusive"), (Inner::Plain, "exclusive")] {
        let ran = AtomicUsize::new(0);
        let result = under_read(&locks, which, &ran).await;
        assert_refused(result, "read share", asked, &ran);
    }
    assert!(theirs.is_held(), "the other reader's share is untouched");
    assert!(
        get(&mut raw, &full("prices")).await.is_some(),
        "the other reader still holds the key"
    );
    theirs.release().await.unwrap();
}

/// Twin: the same write with no enclosing read contends with the other reader's share (the
/// scenario is real: the write must wait), and runs once that share is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twin_a_write_alone_waits_for_the_other_readers_share() {
    let (server, locks, _raw) = start_with_manager().await;
    let other = manager(&server).await;
    let theirs = other
        .rw_lock("prices")
        .read(&opts(30_000, 0))
        .await
        .unwrap();
    let ran = AtomicUsize::new(0);
    let result = inner_write(&locks, &ran).await;
    assert!(
        matches!(result, Err(AppError::Lock(LockError::Contended { .. }))),
        "got {result:?}"
    );
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    theirs.release().await.unwrap();
    inner_write(&locks, &ran).await.unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), 1);
}

/// A read inside a write or a plain lock re-enters (the exclusive hold covers it): no second
/// acquire, no self-deadlock; a read inside a read re-enters too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_reenters_a_write_a_plain_lock_and_a_read() {
    let (_server, locks, mut raw) = start_with_manager().await;
    let ran = AtomicUsize::new(0);
    under_write(&locks, Inner::Read, &ran).await.unwrap();
    under_plain(&locks, Inner::Read, &ran).await.unwrap();
    under_read(&locks, Inner::Read, &ran).await.unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), 3, "every nested read ran");
    assert!(
        get(&mut raw, &full("prices")).await.is_none(),
        "the outermost calls released"
    );
}

/// A permit inside a permit of the same count re-enters (one permit taken, not two); another
/// count, a read inside permits, a plain lock inside permits and permits inside a read are
/// refused, while another client holds a permit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_reenter_only_the_same_count() {
    let (server, locks, _raw) = start_with_manager().await;
    let other = manager(&server).await;
    let theirs = other
        .semaphore("prices", 3)
        .acquire(&opts(30_000, 0))
        .await
        .unwrap();

    let (ran, available) = (AtomicUsize::new(0), AtomicU32::new(99));
    under_permits3(&locks, Inner::Permits3, &ran, &available)
        .await
        .unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), 1, "the nested permit ran");
    assert_eq!(
        available.load(Ordering::SeqCst),
        1,
        "one permit for the outer call and the other client's: the nested call took none"
    );

    for (which, asked) in [
        (Inner::Permits5, "5 permits"),
        (Inner::Read, "read share"),
        (Inner::Plain, "exclusive"),
        (Inner::Write, "exclusive"),
    ] {
        let ran = AtomicUsize::new(0);
        let result = under_permits3(&locks, which, &ran, &available).await;
        assert_refused(result, "3 permits", asked, &ran);
    }
    theirs.release().await.unwrap();

    let ran = AtomicUsize::new(0);
    let result = under_read(&locks, Inner::Permits3, &ran).await;
    assert_refused(result, "read share", "3 permits", &ran);
}
