//! Semaphores and read-write locks when the shares marker is gone, shortened, or met by a lock
//! of another kind (issue 29), each with its twin against a real server:
//!
//! - a share renews only while the lock key holds the shares marker of its kind and its own
//!   member is live: a reader's `extend` after an operator's `DEL` of the marker is `Lost` and
//!   leaves the writer that took the key alone; a semaphore of 1 never keeps two holders renewed;
//!   no share is admitted beside the live shares of a vanished marker (twins: the same extend
//!   and renewals with the marker in place);
//! - the marker (and the share set) live exactly as long as the latest live share: an
//!   `extend(shorter)` shortens them, as does the release of the share that ended last (twin: a
//!   longer extend keeps them at least that long);
//! - a plain lock of a semaphore's key is refused with `InvalidOptions` (twin: a plain lock
//!   waits for readers, as the write lock must);
//! - a waiter that can never share the key with the shares a release grants (another number of
//!   permits, or a plain lock behind a semaphore) does not hold up the waiters behind it (twin:
//!   a waiter of the same kind is granted with them).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use lockcore::{LockError, LockGuard, LockManager, LockOptions};
use lockcore_tests::*;
use redis::aio::MultiplexedConnection;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep};

const KEY: &str = "shared";

/// The share set of `KEY`.
fn share_set() -> String {
    lockcore::keyspace::shares_key(lockcore::DEFAULT_KEY_PREFIX, &full(KEY))
}

/// The members of the share set whose lease has not ended by the server's clock.
async fn live_shares(raw: &mut MultiplexedConnection) -> Vec<String> {
    let now = server_now_ms(raw).await;
    let from = format!("({now}");
    query(raw, &cmd(&["ZRANGEBYSCORE", &share_set(), &from, "+inf"])).await
}

/// The marker's value at `KEY`, if it holds the shares marker.
async fn marker(raw: &mut MultiplexedConnection) -> Option<String> {
    get(raw, &full(KEY))
        .await
        .filter(|value| lockcore::keyspace::is_shares_marker(value))
}

/// Whether a `PTTL` reply says the key ends within `ms` (-2: it ended already; -1, no expiry,
/// is never right for lockcore's keys).
fn ended_within(pttl: i64, ms: i64) -> bool {
    pttl == -2 || (1..=ms).contains(&pttl)
}

/// A read share or a permit of a semaphore of `permits` on `KEY`.
async fn share(locks: &LockManager, permits: Option<u32>, opts: &LockOptions) -> LockGuard {
    match permits {
        Some(n) => locks.semaphore(KEY, n).acquire(opts).await,
        None => locks.rw_lock(KEY).read(opts).await,
    }
    .unwrap_or_else(|e| panic!("share of {permits:?}: {e:?}"))
}

/// An operator's `DEL` of the marker removes the readers' hold: the writer that takes the key
/// keeps its own TTL, and the reader's `extend` is `Lost` (it used to set the writer's 1 s key
/// to 30 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_readers_extend_after_the_marker_is_deleted_is_lost_and_leaves_the_writer_alone() {
    let (_server, locks, mut raw) = start_with_manager().await;
    let rw = locks.rw_lock(KEY);
    let mut reader = rw.read(&opts(10_000, 0)).await.unwrap();
    del(&mut raw, &full(KEY)).await;
    let writer = rw
        .try_write(&opts(1_000, 0))
        .await
        .unwrap()
        .expect("the key is free once the marker is gone");
    let extended = reader.extend(Duration::from_secs(30)).await;
    let writer_ttl = pttl(&mut raw, &full(KEY)).await;
    assert!(
        writer_ttl <= 1_000,
        "the reader's extend rewrote the writer's 1 s key to {writer_ttl} ms"
    );
    assert!(
        matches!(&extended, Err(e) if e.is_lost()),
        "a share without its marker is lost: {extended:?}"
    );
    assert!(!reader.is_held());
    assert!(
        live_shares(&mut raw).await.is_empty(),
        "the lost share left its member behind"
    );
    writer.release().await.unwrap();
}

/// Twin: with the marker in place, the same extend renews the share and the marker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twin_a_readers_extend_with_its_marker_renews_it() {
    let (_server, locks, mut raw) = start_with_manager().await;
    let mut reader = locks.rw_lock(KEY).read(&opts(10_000, 0)).await.unwrap();
    reader.extend(Duration::from_secs(30)).await.unwrap();
    let ttl = pttl(&mut raw, &full(KEY)).await;
    assert!(ttl > 25_000, "the marker follows the share: {ttl} ms");
    assert_eq!(live_shares(&mut raw).await, [reader.token()]);
    reader.release().await.unwrap();
}

/// A semaphore of 1 whose marker is deleted: the first holder's renewal finds its share lost,
/// the second client gets the permit, and from then on exactly one holder is renewed (both
/// were, 1.5 s later, before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_of_one_never_keeps_two_holders_after_its_marker_is_deleted() {
    let (_server, locks, mut raw) = start_with_manager().await;
    let sem = locks.semaphore(KEY, 1);
    let watched = opts(1_500, 10_000).watchdog(true);
    let first = sem.acquire(&watched).await.unwrap();
    del(&mut raw, &full(KEY)).await;
    let second = sem.acquire(&watched).await.unwrap();
    let until = Instant::now() + Duration::from_secs(5);
    while first.is_held() {
        assert!(
            Instant::now() < until,
            "the first holder is still renewed beside the second: live shares {:?}",
            live_shares(&mut raw).await
        );
        sleep(Duration::from_millis(20)).await;
    }
    // For 1.5 s (several renewals of each): one holder, one live share, the marker its own.
    let until = Instant::now() + Duration::from_millis(1_500);
    while Instant::now() < until {
        assert!(second.is_held() && !first.is_held());
        assert_eq!(live_shares(&mut raw).await, [second.token()]);
        assert!(marker(&mut raw).await.is_some());
        sleep(Duration::from_millis(50)).await;
    }
    assert!(first.release().await.unwrap_err().is_lost());
    second.release().await.unwrap();
}

/// Twin: with the marker in place, the watchdog keeps the one permit past its TTL and nobody
/// else gets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twin_a_semaphore_of_one_keeps_its_one_holder_renewed() {
    let (_server, locks, mut raw) = start_with_manager().await;
    let sem = locks.semaphore(KEY, 1);
    let first = sem.acquire(&opts(1_500, 0).watchdog(true)).await.unwrap();
    let until = Instant::now() + Duration::from_millis(2_500);
    while Instant::now() < until {
        assert!(sem.try_acquire(&opts(1_500, 0)).await.unwrap().is_none());
        sleep(Duration::from_millis(50)).await;
    }
    assert!(first.is_held());
    assert_eq!(live_shares(&mut raw).await, [first.token()]);
    first.release().await.unwrap();
}

/// No share is admitted beside the live share of a deleted marker, of another kind (a permit
/// beside a reader) or beyond N (a second permit of a semaphore of 1); once that share is gone
/// (its holder finds it lost), the key takes the newcomer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_share_is_admitted_beside_the_live_share_of_a_deleted_marker() {
    let (_server, locks, mut raw) = start_with_manager().await;
    let sem = locks.semaphore(KEY, 1);
    for first in [None, Some(1)] {
        let mut held = share(&locks, first, &opts(10_000, 0)).await;
        del(&mut raw, &full(KEY)).await;
        assert!(
            sem.try_acquire(&opts(10_000, 0)).await.unwrap().is_none(),
            "{first:?}: a permit was admitted beside a live share: shares {:?}, marker {:?}",
            live_shares(&mut raw).await,
            get(&mut raw, &full(KEY)).await
        );
        assert_eq!(sem.available().await.unwrap(), 0, "{first:?}: none is free");
        assert!(
            held.extend(Duration::from_secs(10))
                .await
                .unwrap_err()
                .is_lost()
        );
        let permit = sem
            .try_acquire(&opts(10_000, 0))
            .await
            .unwrap()
            .expect("the lost share is gone");
        assert_eq!(sem.available().await.unwrap(), 0, "{first:?}: taken");
        assert_eq!(
            marker(&mut raw).await.as_deref(),
            Some("__shares__ {\"permits\":1}")
        );
        permit.release().await.unwrap();
    }
}

/// A share extended to a shorter lease, then abandoned (its holder crashed): the marker and the
/// share set end with that lease, not the first one, and the next holder gets in (a writer
/// after a reader, a permit of a semaphore of 1 after the other).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_shorter_shortens_the_marker_for_readers_and_permits() {
    let (_server, locks, mut raw) = start_with_manager().await;
    for permits in [None, Some(1)] {
        let mut held = share(&locks, permits, &opts(10_000, 0)).await;
        held.extend(Duration::from_millis(300)).await.unwrap();
        let (lock_ttl, set_ttl) = (
            pttl(&mut raw, &full(KEY)).await,
            pttl(&mut raw, &share_set()).await,
        );
        assert!(
            ended_within(lock_ttl, 300) && ended_within(set_ttl, 300),
            "{permits:?}: after extend(300 ms) the marker lives {lock_ttl} ms, the set {set_ttl} ms"
        );
        // The holder crashes: nothing releases. The next one gets in once the 300 ms are over.
        std::mem::forget(held);
        let wait = opts(1_000, 5_000);
        let next = match permits {
            None => locks.acquire(KEY, &wait).await,
            Some(n) => locks.semaphore(KEY, n).acquire(&wait).await,
        };
        next.unwrap_or_else(|e| panic!("{permits:?}: {e:?}"))
            .release()
            .await
            .unwrap();
    }
}

/// Among several shares, the marker follows the latest live deadline: shortened by the
/// extend of the share that ended last, and by the release of the one that ends last then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn among_several_shares_the_marker_follows_the_latest_deadline() {
    let (_server, locks, mut raw) = start_with_manager().await;
    for permits in [None, Some(2)] {
        let mut first = share(&locks, permits, &opts(60_000, 0)).await;
        let second = share(&locks, permits, &opts(30_000, 0)).await;
        first.extend(Duration::from_secs(1)).await.unwrap();
        for key in [full(KEY), share_set()] {
            let ttl = pttl(&mut raw, &key).await;
            assert!(
                (20_000..=30_000).contains(&ttl),
                "{permits:?}: {key} should end with the second share's 30 s, lives {ttl} ms"
            );
        }
        second.release().await.unwrap();
        for key in [full(KEY), share_set()] {
            let ttl = pttl(&mut raw, &key).await;
            assert!(
                ended_within(ttl, 1_000),
                "{permits:?}: {key} should end with the first share's 1 s, lives {ttl} ms"
            );
        }
        first.release().await.unwrap();
        assert!(!exists(&mut raw, &full(KEY)).await);
    }
}

/// Twin: a longer extend keeps the marker and the set at least that long, and a release of a
/// share that ends first leaves them to the one that ends last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twin_extend_longer_keeps_the_marker_that_long() {
    let (_server, locks, mut raw) = start_with_manager().await;
    for permits in [None, Some(2)] {
        let mut first = share(&locks, permits, &opts(10_000, 0)).await;
        let second = share(&locks, permits, &opts(10_000, 0)).await;
        first.extend(Duration::from_secs(30)).await.unwrap();
        second.release().await.unwrap();
        for key in [full(KEY), share_set()] {
            let ttl = pttl(&mut raw, &key).await;
            assert!(ttl > 25_000, "{permits:?}: {key} lives {ttl} ms");
        }
        first.release().await.unwrap();
        assert!(!exists(&mut raw, &full(KEY)).await);
    }
}

/// A plain lock of a key held as a semaphore is refused at once, naming the key and the
/// number of permits (it used to wait out its budget and report `Contended`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_lock_of_a_semaphores_key_is_refused_naming_it() {
    let (_server, locks, _raw) = start_with_manager().await;
    let permit = locks
        .semaphore(KEY, 3)
        .acquire(&opts(10_000, 0))
        .await
        .unwrap();
    let refusals = [
        locks.acquire(KEY, &opts(10_000, 2_000)).await.map(|_| ()),
        locks.try_acquire(KEY, &opts(10_000, 0)).await.map(|_| ()),
        locks
            .rw_lock(KEY)
            .write(&opts(10_000, 2_000).handoff(false))
            .await
            .map(|_| ()),
    ];
    for refusal in refusals {
        let Err(LockError::InvalidOptions { reason }) = &refusal else {
            panic!("expected InvalidOptions, got {refusal:?}");
        };
        assert!(
            reason.contains("lock:shared") && reason.contains("semaphore of 3 permits"),
            "{reason}"
        );
    }
    permit.release().await.unwrap();
    locks
        .acquire(KEY, &opts(10_000, 0))
        .await
        .expect("free again: the plain lock takes it")
        .release()
        .await
        .unwrap();
}

/// Twin: a plain lock (the write lock) waits for readers, and gets the key when they go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twin_a_plain_lock_waits_for_readers() {
    let (_server, locks, mut raw) = start_with_manager().await;
    let reader = locks.rw_lock(KEY).read(&opts(10_000, 0)).await.unwrap();
    let err = locks.acquire(KEY, &opts(10_000, 300)).await.unwrap_err();
    assert!(err.is_contended(), "{err:?}");
    assert!(
        locks
            .try_acquire(KEY, &opts(10_000, 0))
            .await
            .unwrap()
            .is_none()
    );
    let writer = tokio::spawn({
        let locks = locks.clone();
        async move { locks.acquire(KEY, &opts(10_000, 5_000)).await }
    });
    wait_queue_len(&mut raw, 1).await;
    reader.release().await.unwrap();
    writer.await.unwrap().unwrap().release().await.unwrap();
}

/// Queues the acquire of `spawn` behind the `n - 1` waiters already queued.
async fn queue_nth<F>(
    raw: &mut MultiplexedConnection,
    n: usize,
    spawn: F,
) -> JoinHandle<Result<LockGuard, LockError>>
where
    F: Future<Output = Result<LockGuard, LockError>> + Send + 'static,
{
    let task = tokio::spawn(spawn);
    wait_queue_len(raw, n).await;
    task
}

/// A writer holds the key; queued behind it: a permit of a semaphore of 3, then `middle`
/// (`Some(n)`: a permit of a semaphore of n; `None`: a plain lock), then another permit of 3.
/// The writer releases. Returns the number of live shares right after the release, and the
/// three waiters' outcomes.
async fn release_to_a_queue_with(
    middle: Option<u32>,
) -> (usize, Vec<Result<LockGuard, LockError>>) {
    let (_server, locks, mut raw) = start_with_manager().await;
    let writer = locks.acquire(KEY, &opts(30_000, 0)).await.unwrap();
    let wait = opts(10_000, 5_000);
    let (three, w) = (locks.semaphore(KEY, 3), wait.clone());
    let first = queue_nth(&mut raw, 1, async move { three.acquire(&w).await }).await;
    let (l, w) = (locks.clone(), wait.clone());
    let second = queue_nth(&mut raw, 2, async move {
        match middle {
            Some(n) => l.semaphore(KEY, n).acquire(&w).await,
            None => l.acquire(KEY, &w).await,
        }
    })
    .await;
    let (three, w) = (locks.semaphore(KEY, 3), wait.clone());
    let third = queue_nth(&mut raw, 3, async move { three.acquire(&w).await }).await;
    writer.release().await.unwrap();
    let granted = live_shares(&mut raw).await.len();
    let mut outcomes = Vec::new();
    for task in [first, second, third] {
        outcomes.push(task.await.unwrap());
    }
    for guard in outcomes.iter().flatten() {
        assert!(guard.is_held());
    }
    (granted, outcomes)
}

/// A permit waiter of another number of permits, or a plain lock, queued between two permit
/// waiters of a semaphore of 3: the writer's release grants both permits at once (the waiter
/// of another kind used to hold the one behind it up until its own re-check), and that waiter
/// is refused naming both kinds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_of_another_kind_does_not_hold_up_the_waiters_behind_it() {
    for middle in [Some(5), None] {
        let (granted, outcomes) = release_to_a_queue_with(middle).await;
        assert_eq!(
            granted, 2,
            "{middle:?}: the release granted {granted} permit(s); outcomes {outcomes:?}"
        );
        let [first, refused, third] = &outcomes[..] else {
            unreachable!()
        };
        assert!(first.is_ok() && third.is_ok(), "{outcomes:?}");
        let Err(LockError::InvalidOptions { reason }) = refused else {
            panic!("{middle:?}: expected InvalidOptions, got {refused:?}");
        };
        assert!(
            reason.contains("lock:shared") && reason.contains("semaphore of 3 permits"),
            "{reason}"
        );
    }
}

/// Twin: the middle waiter of the same kind is granted with the others, in the same release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twin_a_waiter_of_the_same_kind_is_granted_with_the_others() {
    let (granted, outcomes) = release_to_a_queue_with(Some(3)).await;
    assert_eq!(granted, 3, "{outcomes:?}");
    assert!(outcomes.iter().all(Result::is_ok), "{outcomes:?}");
}
