//! `LockManager::close` under the conditions of a real shutdown: releases still in flight from
//! guards dropped just before it (an early `?`, an attribute call cancelled by a timeout), a
//! `close` whose own future is dropped, an acquire whose lock is won while the manager closes,
//! and the watchdog's count once close released its leases. Each run of the shutdown tests
//! builds a runtime of its own and drops it after `close`, as `main` does.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;
use std::time::Duration;

use lockcore::{LockError, LockGuard, LockManager, LockOptions, distributed_lock};
use lockcore_tests::*;
use redis::aio::MultiplexedConnection;

/// How many fresh runtimes each shutdown scenario runs in.
const RUNS: usize = 10;

fn held(ttl_ms: u64) -> LockOptions {
    LockOptions::new(Duration::from_millis(ttl_ms)).wait(Duration::ZERO)
}

/// Every key on the server whose name contains `name` (the lock key, a share set, a queue).
async fn keys_of(raw: &mut MultiplexedConnection, name: &str) -> Vec<String> {
    keys(raw, &format!("*{name}*")).await
}

/// What one shutdown run holds when it ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Plain,
    Permit,
    Read,
    /// A `#[distributed_lock]` call cancelled by `tokio::time::timeout` while its body runs.
    Attribute,
}

#[distributed_lock(key = "shutdown:attribute:<run>", ttl_ms = 30_000, manager = locks)]
async fn long_job(
    locks: &LockManager,
    run: usize,
    started: Arc<AtomicBool>,
) -> Result<(), LockError> {
    started.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(60)).await;
    Ok(())
}

/// A guard of `kind` on `name` (30 s lease), or `None` for an attribute call that was
/// acquired, then cancelled by a timeout (its guard dropped with it).
async fn take(locks: &LockManager, kind: Kind, name: &str, run: usize) -> Option<LockGuard> {
    let opts = held(30_000);
    let taken = match kind {
        Kind::Plain => locks.acquire(name, &opts).await,
        Kind::Permit => locks.semaphore(name, 3).acquire(&opts).await,
        Kind::Read => locks.rw_lock(name).read(&opts).await,
        Kind::Attribute => {
            let started = Arc::new(AtomicBool::new(false));
            let call = long_job(locks, run, Arc::clone(&started));
            let cancelled = tokio::time::timeout(Duration::from_millis(300), call).await;
            assert!(cancelled.is_err(), "the body runs for 60 s: {cancelled:?}");
            assert!(
                started.load(Ordering::SeqCst),
                "the body ran under the lock"
            );
            return None;
        }
    };
    Some(taken.unwrap_or_else(|e| panic!("{kind:?} {name}: {e}")))
}

/// How a shutdown run ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// The guard is dropped (its release spawned), then `close` runs at once.
    DropThenClose,
    /// The guard is still held when `close` runs.
    CloseWhileHeld,
    /// No `close`: the runtime ends with the guard still held (the control that shows a key
    /// left behind is seen).
    NoClose,
}

/// `RUNS` runs of `kind`, each in a fresh multi-thread runtime (as `#[tokio::main]`): connect,
/// take the lock, end as `ending` says, drop the runtime. Returns the keys left behind.
async fn shutdown_runs(server: &RedisServer, kind: Kind, ending: Ending) -> Vec<String> {
    let mut raw = server.connection().await;
    let mut left = Vec::new();
    for run in 0..RUNS {
        let name = match kind {
            Kind::Attribute => format!("shutdown:attribute:{run}"),
            _ => format!("shutdown:{kind:?}:{ending:?}:{run}"),
        };
        let url = server.url();
        let task_name = name.clone();
        // A thread of its own, outside the test's runtime, as `main`'s.
        let run_main = move || {
            let runtime = multi_thread_runtime(2);
            let outlived = runtime.block_on(async {
                let locks = LockManager::connect(&url)
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
                let guard = take(&locks, kind, &task_name, run).await;
                match ending {
                    Ending::DropThenClose => {
                        drop(guard);
                        locks.close().await.unwrap_or_else(|e| panic!("close: {e}"));
                        None
                    }
                    Ending::CloseWhileHeld => {
                        locks.close().await.unwrap_or_else(|e| panic!("close: {e}"));
                        guard
                    }
                    Ending::NoClose => guard,
                }
            });
            // `main` returns: the runtime goes first, then what outlived it.
            drop(runtime);
            drop(outlived);
        };
        tokio::task::spawn_blocking(move || std::thread::spawn(run_main).join())
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|_| panic!("{kind:?} run {run} panicked"));
        left.extend(keys_of(&mut raw, &name).await);
    }
    left
}

/// A guard dropped just before `close` has its release in flight; `close` waits for it, so
/// the runtime can end right after: no key is left, for a plain lock, a semaphore permit, a
/// read share and an attribute call cancelled by a timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_finishes_the_releases_of_guards_dropped_just_before() {
    let server = RedisServer::start();
    let mut raw = server.connection().await;
    let mut failures = Vec::new();
    for kind in [Kind::Plain, Kind::Permit, Kind::Read, Kind::Attribute] {
        let left = shutdown_runs(&server, kind, Ending::DropThenClose).await;
        if !left.is_empty() {
            let mut ttls = Vec::new();
            for key in &left {
                ttls.push(format!("{key} (pttl {})", pttl(&mut raw, key).await));
            }
            let runs = left
                .iter()
                .filter(|key| key.starts_with(&full("shutdown:")))
                .count();
            failures.push(format!(
                "{kind:?}: {runs} of {RUNS} runs left keys: {ttls:?}"
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Twin: a guard still held when `close` runs is released by it (no key left), and without
/// `close` the runtime's end leaves every key behind (the test sees a key left).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_releases_held_guards_and_without_close_the_keys_stay() {
    let server = RedisServer::start();
    let mut raw = server.connection().await;
    for kind in [Kind::Plain, Kind::Permit, Kind::Read] {
        let left = shutdown_runs(&server, kind, Ending::CloseWhileHeld).await;
        assert!(left.is_empty(), "{kind:?}: close left {left:?}");
        let left = shutdown_runs(&server, kind, Ending::NoClose).await;
        let lock_keys: Vec<&String> = left
            .iter()
            .filter(|key| key.starts_with(&full("shutdown:")))
            .collect();
        assert_eq!(lock_keys.len(), RUNS, "{kind:?}: without close: {left:?}");
        for key in lock_keys {
            let ms = pttl(&mut raw, key).await;
            assert!(ms > 20_000, "{kind:?}: {key} stays for its ttl: pttl {ms}");
        }
    }
}

/// Polls `future` once, then drops it: a `close` cancelled at its first `.await` (a timeout
/// around it that fires, a `select!` that picks another branch).
async fn poll_once_then_drop(future: impl Future) {
    let mut future = std::pin::pin!(future);
    std::future::poll_fn(|cx| {
        let _ = future.as_mut().poll(cx);
        Poll::Ready(())
    })
    .await;
}

/// `close` dropped at its first `.await` still releases what it took: the key is gone within
/// a second (not after its 30 s TTL), and a second `close` waits for that work and is `Ok`.
/// Twin: the same guard without any close keeps its key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_dropped_at_its_first_await_still_releases() {
    let (_server, locks, mut raw) = start_with_manager().await;
    let guard = must_acquire(&locks, "cancelled-close", &held(30_000)).await;
    let other = manager(&_server).await;
    let control = must_acquire(&other, "cancelled-close:control", &held(30_000)).await;

    poll_once_then_drop(locks.close()).await;
    let gone = gone_within(
        &mut raw,
        &full("cancelled-close"),
        Duration::from_secs(2),
        Duration::from_millis(10),
    )
    .await;
    assert!(
        gone.is_some(),
        "a close dropped at its first await released nothing: {} has pttl {}",
        full("cancelled-close"),
        pttl(&mut raw, &full("cancelled-close")).await
    );
    assert!(!guard.is_held());
    assert!(locks.close().await.is_ok(), "a second close completes");
    assert!(guard.release().await.is_ok(), "closed: released by close");
    // The control: held, never closed, still there.
    assert!(pttl(&mut raw, &full("cancelled-close:control")).await > 20_000);
    assert!(control.release().await.is_ok());
}

/// A second `close` after a cancelled one waits for the first one's releases: when it
/// returns, every key is gone, and acquires stay refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_close_returns_once_the_cancelled_ones_releases_are_done() {
    let (_server, locks, mut raw) = start_with_manager().await;
    let mut guards = Vec::new();
    for i in 0..20 {
        guards.push(must_acquire(&locks, &format!("second-close:{i}"), &held(30_000)).await);
    }
    poll_once_then_drop(locks.close()).await;
    locks.close().await.unwrap_or_else(|e| panic!("close: {e}"));
    let left = keys_of(&mut raw, "second-close:").await;
    assert!(
        left.is_empty(),
        "the second close returned before {left:?} were released"
    );
    let refused = locks.acquire("second-close:late", &held(1_000)).await;
    assert!(matches!(refused, Err(LockError::Closed)), "{refused:?}");
}

/// What an acquire in flight across `close` asks for.
#[derive(Debug, Clone, Copy)]
enum Call {
    Acquire,
    TryAcquire,
    Permit,
    Read,
    Many,
}

/// Runs one acquire of `how` on `name` through `locks`: `Ok(true)` when it returned guards
/// that hold their keys (then released), `Ok(false)` when a returned guard holds nothing.
async fn acquire_as(locks: &LockManager, how: Call, name: &str) -> Result<bool, LockError> {
    let opts = held(30_000);
    let guards = match how {
        Call::Acquire => vec![locks.acquire(name, &opts).await?],
        Call::TryAcquire => locks.try_acquire(name, &opts).await?.into_iter().collect(),
        Call::Permit => vec![locks.semaphore(name, 2).acquire(&opts).await?],
        Call::Read => vec![locks.rw_lock(name).read(&opts).await?],
        Call::Many => {
            let many = locks
                .acquire_many([format!("{name}:a"), format!("{name}:b")], &opts)
                .await?;
            let holds = many.is_held();
            drop(many);
            return Ok(holds);
        }
    };
    let holds = !guards.is_empty() && guards.iter().all(LockGuard::is_held);
    drop(guards);
    Ok(holds)
}

/// An acquire whose `SET` ran while its reply was held back by a proxy (400 ms), with the
/// manager's `close` in between, returns `Err(Closed)` and leaves nothing behind; it never
/// returns a guard that holds nothing; and `close` waits for it: when close returns, the key
/// is gone already (a runtime that ends then leaves nothing). Twin: without the close, the same
/// acquire returns a guard that holds its key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_won_while_the_manager_closes_returns_closed_and_leaves_nothing() {
    let server = RedisServer::start();
    let mut raw = server.connection().await;
    let mut failures = Vec::new();
    for how in [
        Call::Acquire,
        Call::TryAcquire,
        Call::Permit,
        Call::Read,
        Call::Many,
    ] {
        for close in [true, false] {
            let proxy = FaultProxy::start(&server).await;
            let locks = LockManager::builder()
                .url(proxy.url())
                .response_timeout(Duration::from_secs(5))
                .build()
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            proxy.set_latency(Direction::Replies, Duration::from_millis(400));
            let name = format!("in-flight:{how:?}:{close}");
            let call = {
                let (locks, name) = (locks.clone(), name.clone());
                tokio::spawn(async move { acquire_as(&locks, how, &name).await })
            };
            // The acquire ran on Redis; its reply is on its way back (bounded poll: there is
            // no signal for a server-side change).
            let ran = async {
                for _ in 0..200 {
                    if !keys_of(&mut raw, &name).await.is_empty() {
                        return true;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                false
            };
            assert!(ran.await, "{how:?}: the acquire ran on Redis within 2 s");
            let mut left_at_close = Vec::new();
            if close {
                locks.close().await.unwrap_or_else(|e| panic!("close: {e}"));
                left_at_close = keys_of(&mut raw, &name).await;
            }
            let outcome = call.await.unwrap_or_else(|e| panic!("{how:?}: {e}"));
            let left = keys_of(&mut raw, &name).await;
            match (close, &outcome) {
                (true, Err(LockError::Closed)) if left.is_empty() && left_at_close.is_empty() => {}
                (true, _) => failures.push(format!(
                    "{how:?} across close: {outcome:?}, keys left when close returned: {left_at_close:?}, when the acquire returned: {left:?}"
                )),
                (false, Ok(true)) => {}
                (false, _) => failures.push(format!("{how:?} without close: {outcome:?}")),
            }
            proxy.set_latency(Direction::Replies, Duration::ZERO);
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// `live_renewals()` counts only what the watchdog renews: once `close` released a watchdog
/// guard's lease it is 0 at once, not at the watchdog's next tick (10 s for a 30 s lease).
/// Twin: before the close it counts the guard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_renewals_drops_to_zero_when_close_releases() {
    let (_server, locks, mut raw) = start_with_manager().await;
    let guard = must_acquire(&locks, "renewed", &held(30_000).watchdog(true)).await;
    assert_eq!(locks.live_renewals(), 1, "the watchdog renews the guard");
    locks.close().await.unwrap_or_else(|e| panic!("close: {e}"));
    assert!(!exists(&mut raw, &full("renewed")).await);
    assert_eq!(
        locks.live_renewals(),
        0,
        "close released the lease; nothing is renewed any more"
    );
    assert!(guard.release().await.is_ok());
}

/// A release of `close` that fails (the connection was reset under it) is retried, and `close`
/// returns only once it landed: the key is gone when it returns, whatever it reports. Twin: the
/// reset alone leaves the held key in place (it is the release that removes it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_retries_a_release_that_failed() {
    let server = RedisServer::start();
    let mut raw = server.connection().await;
    let proxy = FaultProxy::start(&server).await;
    let locks = LockManager::builder()
        .url(proxy.url())
        .build()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let _guard = must_acquire(&locks, "reset-close", &held(30_000)).await;
    proxy.reset_connections().await;
    assert!(
        pttl(&mut raw, &full("reset-close")).await > 20_000,
        "the reset alone leaves the key"
    );
    let closed = locks.close().await;
    let left = keys_of(&mut raw, "reset-close").await;
    assert!(
        left.is_empty(),
        "close returned {closed:?} with {left:?} still held"
    );
}
