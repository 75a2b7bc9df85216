//! `#[distributed_lock]` policies against a real Redis: `keys = [..]` (transfers in opposite
//! directions, with the twins that lose updates or deadlock), `on_contended = "skip"`,
//! `fallback = path`, and reentrancy with both `reentrant` settings.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lockcore::{LockError, LockManager, MultiGuard, distributed_lock};
use lockcore_tests::*;
use redis::aio::MultiplexedConnection;
use tokio::sync::Barrier;

#[derive(Debug, thiserror::Error)]
enum AppError {
    #[error(transparent)]
    Lock(#[from] LockError),
}

// ---- keys = [..]: transfers in opposite directions --------------------------------------------

async fn balance(con: &mut MultiplexedConnection, account: &str) -> i64 {
    let value: Option<i64> = query(con, redis::cmd("GET").arg(format!("acct:{account}"))).await;
    value.unwrap_or(0)
}

async fn set_balance(con: &mut MultiplexedConnection, account: &str, value: i64) {
    let _: () = query(
        con,
        redis::cmd("SET").arg(format!("acct:{account}")).arg(value),
    )
    .await;
}

/// Read both balances, yield (or wait until every transfer has read, with `between`), write
/// both back: a lost update whenever two transfers touching an account interleave.
async fn move_money(
    mut con: MultiplexedConnection,
    from: &str,
    to: &str,
    between: Option<&Barrier>,
) {
    let (a, b) = (balance(&mut con, from).await, balance(&mut con, to).await);
    match between {
        Some(barrier) => {
            barrier.wait().await;
        }
        None => tokio::task::yield_now().await,
    }
    set_balance(&mut con, from, a - 1).await;
    set_balance(&mut con, to, b + 1).await;
}

#[distributed_lock(keys = ["acct:<from>", "acct:<to>"], manager = m, ttl_ms = 5000, wait_ms = 20_000, guard = held)]
async fn transfer(
    m: &LockManager,
    con: MultiplexedConnection,
    from: String,
    to: String,
) -> Result<Vec<u64>, AppError> {
    move_money(con, &from, &to, None).await;
    Ok(held.fencing_tokens())
}

/// The twin: the same transfer without the locks; every transfer reads before any writes.
async fn transfer_unlocked(
    between: &Barrier,
    con: MultiplexedConnection,
    from: String,
    to: String,
) -> Result<Vec<u64>, AppError> {
    move_money(con, &from, &to, Some(between)).await;
    Ok(Vec::new())
}

/// 2 × 30 transfers, half `a → b`, half `b → a`, all at once. Returns the final balances.
async fn opposite_transfers(server: &RedisServer, locked: bool) -> (i64, i64) {
    let m = manager(server).await;
    let between = std::sync::Arc::new(Barrier::new(60));
    let mut tasks = Vec::new();
    for i in 0..60 {
        let (m, con, between) = (m.clone(), server.connection().await, between.clone());
        let (from, to) = if i % 2 == 0 { ("a", "b") } else { ("b", "a") };
        let (from, to) = (from.to_owned(), to.to_owned());
        tasks.push(tokio::spawn(async move {
            if locked {
                transfer(&m, con, from, to).await
            } else {
                transfer_unlocked(&between, con, from, to).await
            }
        }));
    }
    for task in tasks {
        task.await.expect("transfer task").expect("transfer");
    }
    let mut con = server.connection().await;
    (balance(&mut con, "a").await, balance(&mut con, "b").await)
}

/// `keys` in canonical order: opposite transfers all complete (no deadlock) and no update is
/// lost; each key has its own fencing token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_make_opposite_transfers_exact_and_the_unlocked_twin_loses_updates() {
    let locked = RedisServer::start();
    assert_eq!(opposite_transfers(&locked, true).await, (0, 0));
    let unlocked = RedisServer::start();
    let (a, b) = opposite_transfers(&unlocked, false).await;
    // Every transfer read (0, 0), so every write is ±1: the balances cannot come back to 0.
    assert!(
        (a, b) != (0, 0),
        "without the locks transfers are lost, got {a}, {b}"
    );
}

#[tokio::test]
async fn keys_expose_a_fencing_token_per_key_and_are_released_together() {
    let (server, m, mut raw) = start_with_manager().await;
    let tokens = transfer(&m, server.connection().await, "y".into(), "x".into())
        .await
        .expect("transfer");
    assert_eq!(tokens.len(), 2);
    assert_ne!(tokens[0], tokens[1], "one fencing token per key");
    assert!(!exists(&mut raw, &full("acct:x")).await);
    assert!(!exists(&mut raw, &full("acct:y")).await);
}

/// The twin of the canonical order: two callers that take the same two keys in argument order
/// (`a` then `b`, and `b` then `a`) deadlock: each holds one key and waits for the other until
/// its budget runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn argument_order_twin_deadlocks_where_keys_does_not() {
    let (_server, m, _raw) = start_with_manager().await;
    let barrier = std::sync::Arc::new(Barrier::new(2));
    let in_argument_order = |first: &'static str, second: &'static str| {
        let (m, barrier) = (m.clone(), barrier.clone());
        tokio::spawn(async move {
            let _held = must_acquire(&m, first, &opts(5000, 0)).await;
            barrier.wait().await; // both hold their first key
            let second = m.acquire(second, &opts(5000, 300)).await.map(drop);
            barrier.wait().await; // and keep it until both attempts have ended
            second
        })
    };
    let (one, two) = (in_argument_order("a", "b"), in_argument_order("b", "a"));
    let (one, two) = (one.await.expect("task"), two.await.expect("task"));
    assert!(one.is_err_and(|e| e.is_contended()));
    assert!(two.is_err_and(|e| e.is_contended()));

    // The same interleaving with `acquire_many`: both orders take `a` first, so one waits
    // for the other instead of deadlocking.
    let barrier = std::sync::Arc::new(Barrier::new(2));
    let canonical = |keys: [&'static str; 2]| {
        let (m, barrier) = (m.clone(), barrier.clone());
        tokio::spawn(async move {
            barrier.wait().await;
            let both = m.acquire_many(keys, &opts(5000, 5000)).await?;
            both.release().await
        })
    };
    let (one, two) = (canonical(["a", "b"]), canonical(["b", "a"]));
    one.await.expect("task").expect("a, b");
    two.await.expect("task").expect("b, a");
}

/// All or nothing: when the second key is held, the first is released before the error.
#[tokio::test]
async fn acquire_many_is_all_or_nothing() {
    let (_server, m, mut raw) = start_with_manager().await;
    let held = must_acquire(&m, "k2", &opts(5000, 0)).await;
    let (error, _) =
        timed_failure(m.acquire_many(["k2", "k1"], &opts(5000, 200)), "k2 is held").await;
    assert!(matches!(&error, LockError::Contended { key, .. } if *key == full("k2")));
    assert!(
        !exists(&mut raw, &full("k1")).await,
        "k1 released on failure"
    );
    held.release().await.expect("release");
    let err = m
        .acquire_many(Vec::<String>::new(), &opts(5000, 0))
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::InvalidKey { .. }));
    let both: MultiGuard = m
        .acquire_many(["k1", "k2", "k1"], &opts(5000, 0))
        .await
        .expect("free");
    assert_eq!(both.keys().collect::<Vec<_>>(), [full("k1"), full("k2")]);
    assert!(both.get("k2").is_some() && both.fencing_token("k1").is_some());
    both.release().await.expect("release");
}

// ---- on_contended = "skip" and fallback = path -------------------------------------------------

static BODY_RUNS: AtomicUsize = AtomicUsize::new(0);

#[distributed_lock(key = "job:<id>", manager = m, wait_ms = 100, on_contended = "skip")]
async fn skip_unit(m: &LockManager, id: u64) -> Result<(), AppError> {
    BODY_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[distributed_lock(key = "job:<id>", manager = m, wait_ms = 100, on_contended = "skip")]
async fn skip_option(m: &LockManager, id: u64) -> Result<Option<u64>, AppError> {
    Ok(Some(id))
}

#[distributed_lock(key = "job:<id>", manager = m, wait_ms = 100, on_contended = "error")]
async fn error_twin(m: &LockManager, id: u64) -> Result<Option<u64>, AppError> {
    Ok(Some(id))
}

fn busy(_m: &LockManager, id: u64) -> Result<String, AppError> {
    Ok(format!("busy {id}"))
}

async fn busy_later(_m: &LockManager, id: u64) -> Result<String, AppError> {
    tokio::task::yield_now().await;
    Ok(format!("later {id}"))
}

#[distributed_lock(key = "job:<id>", manager = m, wait_ms = 100, fallback = busy)]
async fn with_fallback(m: &LockManager, id: u64) -> Result<String, AppError> {
    Ok(format!("ran {id}"))
}

#[distributed_lock(key = "job:<id>", manager = m, wait_ms = 100, fallback = busy_later)]
async fn with_async_fallback(m: &LockManager, id: u64) -> Result<String, AppError> {
    Ok(format!("ran {id}"))
}

#[tokio::test]
async fn skip_and_fallback_under_contention() {
    let (_server, m, _raw) = start_with_manager().await;
    let events = CapturedEvents::default();
    let _capture = tracing::subscriber::set_default(events.clone());

    let holder = must_acquire(&m, "job:1", &opts(5000, 0)).await;
    let runs = BODY_RUNS.load(Ordering::SeqCst);
    skip_unit(&m, 1).await.expect("skipped, not an error");
    assert_eq!(
        BODY_RUNS.load(Ordering::SeqCst),
        runs,
        "a skipped body never runs"
    );
    assert_eq!(skip_option(&m, 1).await.expect("skipped"), None);
    // The twin: without `skip` the same call is an error.
    let err = error_twin(&m, 1).await.unwrap_err();
    assert!(matches!(err, AppError::Lock(e) if e.is_contended()));
    assert_eq!(with_fallback(&m, 1).await.expect("fallback"), "busy 1");
    assert_eq!(
        with_async_fallback(&m, 1).await.expect("fallback"),
        "later 1"
    );
    let debug = events.at(tracing::Level::DEBUG);
    assert!(
        debug
            .iter()
            .any(|e| e.contains("skipped the body") && e.contains("lock:job:1")),
        "{debug:?}"
    );
    assert!(
        debug.iter().any(|e| e.contains("called the fallback")),
        "{debug:?}"
    );
    holder.release().await.expect("release");

    // Free: the bodies run.
    skip_unit(&m, 1).await.expect("ran");
    assert_eq!(BODY_RUNS.load(Ordering::SeqCst), runs + 1);
    assert_eq!(skip_option(&m, 1).await.expect("ran"), Some(1));
    assert_eq!(with_fallback(&m, 1).await.expect("ran"), "ran 1");
}

// ---- reentrancy -------------------------------------------------------------------------------

const BUDGET: Duration = Duration::from_secs(10);

/// Must return well before [`BUDGET`].
async fn quickly<T>(call: impl Future<Output = T>) -> T {
    tokio::time::timeout(BUDGET / 10, call)
        .await
        .expect("the nested call stalled instead of returning at once")
}

#[distributed_lock(key = "acct:<id>", manager = m, wait_ms = 10_000, guard = g)]
async fn inner_reentrant(m: &LockManager, id: u64) -> Result<String, AppError> {
    Ok(g.token().to_owned())
}

#[distributed_lock(key = "acct:<id>", manager = m, wait_ms = 10_000, reentrant = false)]
async fn inner_not_reentrant(m: &LockManager, id: u64) -> Result<(), AppError> {
    Ok(())
}

#[distributed_lock(key = "acct:<id>", manager = m, wait_ms = 10_000, guard = g)]
async fn outer(m: &LockManager, id: u64, reentrant: bool) -> Result<(), AppError> {
    if reentrant {
        let token = quickly(inner_reentrant(m, id)).await?;
        assert_eq!(
            token,
            g.token(),
            "the nested call runs under the outer lock"
        );
    } else {
        let err = quickly(inner_not_reentrant(m, id)).await.unwrap_err();
        let AppError::Lock(err) = err;
        assert!(err.is_already_held(), "{err:?}");
        assert!(
            matches!(err, LockError::AlreadyHeld { key } if key == full(&format!("acct:{id}")))
        );
    }
    // Only the outermost call releases.
    assert!(
        m.try_acquire(&format!("acct:{id}"), &opts(1000, 0))
            .await?
            .is_none()
    );
    assert!(g.is_held());
    Ok(())
}

#[tokio::test]
async fn nested_calls_return_at_once_with_both_reentrant_settings() {
    let (_server, m, mut raw) = start_with_manager().await;
    outer(&m, 1, true).await.expect("reentrant");
    assert!(
        !exists(&mut raw, &full("acct:1")).await,
        "the outer call released"
    );
    outer(&m, 2, false).await.expect("not reentrant");
    assert!(!exists(&mut raw, &full("acct:2")).await);
}

#[distributed_lock(key = "acct:<id>", manager = m, wait_ms = 200)]
async fn inner_short_wait(m: LockManager, id: u64) -> Result<(), AppError> {
    Ok(())
}

#[distributed_lock(key = "acct:<id>", manager = m, wait_ms = 10_000)]
async fn outer_spawning(m: &LockManager, id: u64) -> Result<AppError, AppError> {
    // A spawned task does not inherit the hold: its locked call waits like any other
    // contender's, and gives up after its 200 ms.
    let nested = tokio::spawn(inner_short_wait(m.clone(), id));
    Ok(nested.await.expect("task").unwrap_err())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spawned_task_does_not_inherit_the_hold() {
    let (_server, m, _raw) = start_with_manager().await;
    let AppError::Lock(err) = outer_spawning(&m, 3).await.expect("outer");
    assert!(err.is_contended(), "{err:?}");
}

#[distributed_lock(keys = ["acct:<a>", "acct:<b>"], manager = m, wait_ms = 10_000, guard = g)]
async fn inner_pair(m: &LockManager, a: u64, b: u64) -> Result<usize, AppError> {
    Ok(g.guards().len())
}

#[distributed_lock(keys = ["acct:<a>", "acct:<b>", "acct:<c>"], manager = m, wait_ms = 10_000)]
async fn outer_triple(m: &LockManager, a: u64, b: u64, c: u64) -> Result<usize, AppError> {
    // A subset of the enclosing set re-enters it (and sees the enclosing guards).
    quickly(inner_pair(m, c, a)).await
}

#[distributed_lock(key = "acct:<a>", manager = m, wait_ms = 10_000)]
async fn outer_single(m: &LockManager, a: u64, b: u64) -> Result<LockError, AppError> {
    // Only part of the nested set is held: acquiring the rest while holding `a` could
    // deadlock, so it fails at once instead.
    let AppError::Lock(err) = quickly(inner_pair(m, a, b)).await.unwrap_err();
    Ok(err)
}

#[tokio::test]
async fn nested_key_sets_reenter_a_held_set_and_fail_at_once_on_a_partial_one() {
    let (_server, m, mut raw) = start_with_manager().await;
    assert_eq!(outer_triple(&m, 1, 2, 3).await.expect("subset"), 3);
    let err = outer_single(&m, 4, 5).await.expect("outer");
    assert!(
        matches!(&err, LockError::AlreadyHeld { key } if *key == full("acct:4")),
        "{err:?}"
    );
    for id in 1..=5 {
        assert!(!exists(&mut raw, &full(&format!("acct:{id}"))).await);
    }
}
