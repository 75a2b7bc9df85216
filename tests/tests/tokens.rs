//! Tokens tied to threads or tasks. Every acquisition gets a fresh 128-bit random token, a
//! guard can move between tasks and threads, and no release ever deletes a key that holds a
//! different token.

// Test helpers outside `#[test]` fns may panic on failure too (clippy's allow-*-in-tests
// covers only the test fns themselves).
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockcore::{LockError, LockGuard, LockManager, LockOptions};
use lockcore_tests::*;
use tokio::sync::oneshot;
use tokio::time::{Instant, sleep};

const TASKS: usize = 1000;
const KEYS: usize = 10;
const TTL_MS: u64 = 200;
const MAX_HOLD_MS: u64 = 300;

/// One held lease, as seen by its holder.
#[derive(Debug)]
struct Hold {
    key: usize,
    token: String,
    /// When the acquire returned the guard.
    acquired: Instant,
    /// When the holder stopped relying on the lock: the release call, or the deadline if that
    /// came first.
    end: Instant,
}

#[derive(Debug, Default)]
struct Tally {
    holds: Vec<Hold>,
    contended: usize,
    released_ok: usize,
    /// Releases that started more than ttl (+5 ms) after the acquire returned: the key had
    /// expired on the server, so release must report `Lost`.
    stale_releases: usize,
}

/// The token test on `server` with two independent clients, and its checks.
async fn run_and_check_c03(server: &RedisServer) {
    // 1000 tasks on one thread can keep a reply unread past the default 500 ms response
    // timeout on a loaded machine; this test is about tokens and exclusion, not timeouts.
    let patient = Duration::from_secs(5);
    let (a, b) = (
        manager_with_timeout(server, patient).await,
        manager_with_timeout(server, patient).await,
    );
    check_c03(&run_c03(a, b).await);
}

/// 1000 tasks, keys `k:<i mod 10>`, ttl 200, hold 0..=300 ms, alternating between two
/// independent clients. Waiting is bounded (1 s); `Contended` is an accepted outcome.
async fn run_c03(a: LockManager, b: LockManager) -> Tally {
    let tally = Arc::new(Mutex::new(Tally::default()));
    let opts = LockOptions::new(Duration::from_millis(TTL_MS))
        .wait(Duration::from_millis(1000))
        .retry_base(Duration::from_millis(10))
        .retry_cap(Duration::from_millis(100));
    let mut tasks = Vec::with_capacity(TASKS);
    for i in 0..TASKS {
        let m = if i % 2 == 0 { a.clone() } else { b.clone() };
        let opts = opts.clone();
        let tally = Arc::clone(&tally);
        tasks.push(tokio::spawn(async move {
            let key = i % KEYS;
            let guard = match m.acquire(&format!("k:{key}"), &opts).await {
                Ok(g) => g,
                Err(LockError::Contended { waited, .. }) => {
                    assert!(
                        waited >= Duration::from_millis(1000),
                        "gave up early: {waited:?}"
                    );
                    tally.lock().expect("tally").contended += 1;
                    return;
                }
                Err(e) => panic!("task {i}: unexpected acquire error {e:?}"),
            };
            let acquired = Instant::now();
            let deadline = guard.deadline();
            let token = guard.token().to_owned();
            sleep(Duration::from_millis(fastrand::u64(0..=MAX_HOLD_MS))).await;
            let release_start = Instant::now();
            let stale = release_start > acquired + Duration::from_millis(TTL_MS + 5);
            let released = guard.release().await;
            match &released {
                Ok(()) => assert!(!stale, "task {i}: release of an expired lease said Ok"),
                Err(LockError::Lost { .. }) => {}
                Err(e) => panic!("task {i}: release must be Ok or Lost, got {e:?}"),
            }
            let mut t = tally.lock().expect("tally");
            t.released_ok += usize::from(released.is_ok());
            t.stale_releases += usize::from(stale);
            t.holds.push(Hold {
                key,
                token,
                acquired,
                end: release_start.min(deadline),
            });
        }));
    }
    for task in tasks {
        task.await.expect("a token task panicked");
    }
    Arc::try_unwrap(tally)
        .expect("all tasks are done")
        .into_inner()
        .expect("tally")
}

/// The checks shared by both runtime flavours.
fn check_c03(tally: &Tally) {
    let acquired = tally.holds.len();
    eprintln!(
        "tokens: {acquired} acquired, {} contended, {} released Ok, {} stale releases",
        tally.contended, tally.released_ok, tally.stale_releases
    );
    assert_eq!(acquired + tally.contended, TASKS);
    assert!(
        acquired >= 2 * KEYS,
        "too little progress to mean anything: {tally:?}"
    );
    assert!(tally.released_ok > 0);
    assert!(
        tally.stale_releases > 0,
        "no holder outlived its TTL; the run tested nothing"
    );

    // Fresh 128-bit random token per acquisition, never per thread or task.
    let tokens: HashSet<&str> = tally.holds.iter().map(|h| h.token.as_str()).collect();
    assert_eq!(tokens.len(), acquired, "a token was reused");
    assert!(tally.holds.iter().all(|h| is_uuid_v4(&h.token)));

    // Mutual exclusion within validity. A stale release that deleted another holder's key
    // would let a third holder in while the second still held a valid lease: overlap.
    if let Some(overlap) = first_overlap(&tally.holds) {
        panic!("{overlap}");
    }
}

/// The first pair of holds on one key whose valid leases overlap, described.
fn first_overlap(holds: &[Hold]) -> Option<String> {
    let mut per_key: HashMap<usize, Vec<&Hold>> = HashMap::new();
    for h in holds {
        per_key.entry(h.key).or_default().push(h);
    }
    for (key, mut holds) in per_key {
        holds.sort_by_key(|h| h.acquired);
        let mut latest_end: Option<&Hold> = None;
        for h in holds {
            if let Some(prev) = latest_end
                && h.acquired < prev.end
            {
                return Some(format!(
                    "k:{key}: {} acquired {:?} before {}'s valid lease ended",
                    h.token,
                    prev.end - h.acquired,
                    prev.token
                ));
            }
            if latest_end.is_none_or(|p| h.end > p.end) {
                latest_end = Some(h);
            }
        }
    }
    None
}

/// The twin: the same 1000 tasks with a naive lock (`SET NX PX` polled every 10 ms, released
/// with a plain `DEL`). A holder that outlived its TTL deletes the next holder's key, a third
/// gets in while the second's lease is still valid, and the overlap check sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c03_twin_naive_del_release_lets_holders_overlap() {
    let server = RedisServer::start();
    let cons = [server.connection().await, server.connection().await];
    let mut tasks = Vec::with_capacity(TASKS);
    for i in 0..TASKS {
        let mut con = cons[i % 2].clone();
        tasks.push(tokio::spawn(async move {
            let key = i % KEYS;
            let redis_key = full(&format!("k:{key}"));
            let token = format!("naive-{i}");
            let started = Instant::now();
            // Bounded: at most 1 s of 10 ms polls. The lease ends no earlier than TTL after the
            // winning `SET` was sent (that bounds the server's start of the lease from below).
            let (acquired, lease_end) = loop {
                let sent = Instant::now();
                let won: Option<String> =
                    query(&mut con, &naive_set_nx(&redis_key, &token, TTL_MS)).await;
                if won.is_some() {
                    break (Instant::now(), sent + Duration::from_millis(TTL_MS));
                }
                if started.elapsed() >= Duration::from_secs(1) {
                    return None;
                }
                sleep(Duration::from_millis(10)).await;
            };
            sleep(Duration::from_millis(fastrand::u64(0..=MAX_HOLD_MS))).await;
            let release_start = Instant::now();
            del(&mut con, &redis_key).await;
            Some(Hold {
                key,
                token,
                acquired,
                end: release_start.min(lease_end),
            })
        }));
    }
    let mut holds = Vec::new();
    for task in tasks {
        holds.extend(task.await.expect("a naive token task panicked"));
    }
    let overlap = first_overlap(&holds);
    eprintln!("naive tokens: {} acquired; {overlap:?}", holds.len());
    assert!(
        overlap.is_some(),
        "a naive DEL release should let two holders overlap"
    );
}

/// On a multi-thread runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c03_fresh_tokens_and_exclusion_multi_thread() {
    let server = RedisServer::start();
    run_and_check_c03(&server).await;
    let mut raw = server.connection().await;
    for k in 0..KEYS {
        assert_gone_within(
            &mut raw,
            &full(&format!("k:{k}")),
            Duration::from_millis(300),
        )
        .await;
    }
}

/// On a current_thread runtime: every task shares one thread, so a thread-derived token
/// would make all of them "the same holder".
#[tokio::test]
async fn c03_fresh_tokens_and_exclusion_current_thread() {
    let server = RedisServer::start();
    run_and_check_c03(&server).await;

    // Two acquisitions on one task and one thread are two holders.
    let m = manager(&server).await;
    let first = must_acquire(&m, "same-thread", &opts(5000, 0)).await;
    let second = m
        .try_acquire("same-thread", &opts(5000, 0))
        .await
        .expect("try");
    assert!(
        second.is_none(),
        "the same task must not re-enter a held lock"
    );
    first.release().await.expect("release");
}

fn assert_send_sync_static<T: Send + Sync + 'static>() {}

/// A guard moved to another task (and to another thread with its own runtime) is released
/// there with its own token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c03_guard_moved_to_another_task_releases_there() {
    assert_send_sync_static::<LockGuard>();
    assert_send_sync_static::<LockManager>();
    let (_server, m, mut raw) = start_with_manager().await;

    // Another task.
    let guard = must_acquire(&m, "moved", &opts(5000, 0)).await;
    let token = guard.stored_value().to_owned();
    let (tx, rx) = oneshot::channel::<LockGuard>();
    let releaser = tokio::spawn(async move {
        let guard = rx.await.expect("guard sent");
        guard.release().await
    });
    assert_eq!(
        get(&mut raw, &full("moved")).await.as_deref(),
        Some(token.as_str())
    );
    tx.send(guard).expect("releaser alive");
    releaser
        .await
        .expect("releaser task")
        .expect("release on another task");
    assert!(!exists(&mut raw, &full("moved")).await);

    // Another OS thread, on a runtime of its own.
    let guard = must_acquire(&m, "moved", &opts(5000, 0)).await;
    let released = std::thread::spawn(move || current_thread_runtime().block_on(guard.release()))
        .join()
        .expect("thread");
    released.expect("release on another thread's runtime");
    assert!(!exists(&mut raw, &full("moved")).await);
}
