//! Redis faults: NOSCRIPT, a lost acquire reply, a backend that is down.

// Test helpers outside `#[test]` fns may panic on failure too (clippy's allow-*-in-tests
// covers only the test fns themselves).
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use lockcore::{LockError, LockManager};
use lockcore_tests::*;
use tokio::time::{Instant, sleep};

// ---- NOSCRIPT ---------------------------------------------------------------------------------

/// A holds `order:1`; after `SCRIPT FLUSH` the release succeeds (EVALSHA falls back to
/// EVAL), and so do the first acquire, extend and drop-release after a flush. No false `Lost`.
#[tokio::test]
async fn c06_release_after_script_flush_succeeds() {
    let (server, a, mut raw) = start_with_manager().await;
    let b = manager(&server).await;
    let key = full("order:1");

    let guard = must_acquire(&a, "order:1", &opts(5000, 0)).await;
    script_flush(&mut raw).await;
    let released = guard.release().await;
    assert!(released.is_ok(), "release after SCRIPT FLUSH: {released:?}");
    assert!(!exists(&mut raw, &key).await);

    script_flush(&mut raw).await;
    let mut guard = a
        .acquire("order:1", &opts(5000, 0))
        .await
        .expect("first acquire after a flush");
    assert_eq!(
        get(&mut raw, &key).await.as_deref(),
        Some(guard.stored_value())
    );

    script_flush(&mut raw).await;
    let contender = b.try_acquire("order:1", &opts(5000, 0)).await;
    assert!(
        matches!(contender, Ok(None)),
        "a held key after a flush is Ok(None), got {contender:?}"
    );

    script_flush(&mut raw).await;
    guard
        .extend(Duration::from_millis(3000))
        .await
        .expect("extend after a flush");
    assert!((2_800..=3_000).contains(&pttl(&mut raw, &key).await));

    script_flush(&mut raw).await;
    guard
        .release()
        .await
        .expect("release after a second flush, no false Lost");
    assert!(!exists(&mut raw, &key).await);

    // The release spawned by Drop falls back too.
    let guard = must_acquire(&a, "order:1", &opts(5000, 0)).await;
    script_flush(&mut raw).await;
    drop(guard);
    assert_gone_within(&mut raw, &key, Duration::from_millis(300)).await;
}

/// The twin: a release that sends `EVALSHA` without the `EVAL` fallback (as a pipeline or
/// `invoke_script` would) fails with `NOSCRIPT` after `SCRIPT FLUSH`, and the lock stays.
#[tokio::test]
async fn c06_twin_evalsha_without_fallback_fails_after_flush() {
    let (_server, a, mut raw) = start_with_manager().await;
    let key = full("order:1");
    let release = redis::Script::new(lockcore_tests::lua::COMPARE_AND_DELETE);
    let guard = must_acquire(&a, "order:1", &opts(5000, 0)).await;
    let _: String = release
        .prepare_invoke()
        .load_async(&mut raw)
        .await
        .expect("SCRIPT LOAD");
    script_flush(&mut raw).await;
    let naive: redis::RedisResult<i64> = redis::cmd("EVALSHA")
        .arg(release.get_hash())
        .arg(1)
        .arg(&key)
        .arg(guard.stored_value())
        .query_async(&mut raw)
        .await;
    let err = naive.expect_err("EVALSHA of a flushed script");
    assert_eq!(err.code(), Some("NOSCRIPT"), "got {err:?}");
    assert!(
        exists(&mut raw, &key).await,
        "the naive release left the lock"
    );
    guard
        .release()
        .await
        .expect("lockcore's release falls back");
}

// ---- an acquire whose reply is lost -----------------------------------------------------------

/// The `SET NX` reaches Redis but its reply comes after the client's 100 ms timeout
/// (Redis is paused for 400 ms, standing in for a `DEBUG SLEEP`). The acquire fails with
/// `Redis(..)`, and the compare-and-delete it sent follows the `SET`: within ~1 s of the error
/// the key is gone (it never lives its 30 s TTL). The fencing counter proves the `SET` ran.
#[tokio::test]
async fn c07_lost_acquire_reply_leaves_no_orphan() {
    let server = RedisServer::start();
    let a = manager_with_timeout(&server, Duration::from_millis(100)).await;
    let mut raw = server.connection().await;
    let key = full("order:7");
    // Load the scripts first, so the paused request is the acquire itself.
    acquire_and_release(&a, "warm-up", &opts(1000, 0), "warm-up").await;
    assert_eq!(acquisitions_seen_by_redis(&mut raw).await, 1);

    pause_all_clients(&mut raw, 400).await;
    let (err, elapsed) = timed_failure(
        a.acquire("order:7", &opts(30_000, 0)),
        "the reply cannot arrive within 100 ms",
    )
    .await;
    assert!(err.is_redis(), "a lost reply is a Redis error, got {err:?}");
    assert!(
        elapsed < Duration::from_millis(400),
        "the acquire must give up on its timeout, not wait for the reply ({elapsed:?})"
    );

    let error_at = Instant::now();
    assert_set_ran_then_key_gone(&mut raw, &key, 2, "the timed-out acquire's cleanup").await;
    assert!(error_at.elapsed() <= Duration::from_millis(1100));

    // The manager still works once Redis answers again.
    acquire_and_release(&a, "order:7", &opts(1000, 0), "after the fault").await;
}

/// The twin: the naive `SET key token NX PX 30000` sent with a 100 ms timeout under the same
/// pause: the client sees a timeout, yet the key lives for the whole TTL (an orphan lock).
#[tokio::test]
async fn c07_twin_naive_set_with_timeout_leaves_orphan() {
    let server = RedisServer::start();
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(Duration::from_millis(100)));
    let mut naive = server.connection_with_config(&config).await;
    let mut raw = server.connection().await;
    let key = full("order:7");

    pause_all_clients(&mut raw, 400).await;
    let naive_set: redis::RedisResult<Option<String>> = naive_set_nx(&key, "naive-token", 30_000)
        .query_async(&mut naive)
        .await;
    let err = naive_set.expect_err("the reply cannot arrive within 100 ms");
    assert!(err.is_timeout(), "got {err}");

    assert!(
        appears_within_a_second(&mut raw, &key).await,
        "the naive SET was applied after the pause"
    );
    assert_eq!(get(&mut raw, &key).await.as_deref(), Some("naive-token"));
    assert!(
        pttl(&mut raw, &key).await > 25_000,
        "nobody knows about this lock for 30 s"
    );
}

// ---- backend down -----------------------------------------------------------------------------

/// Redis stopped, acquire with a 3 s wait: a `Redis(..)` error within about one connection
/// timeout (well under 2 s), never `Contended` after 3 s. The manager recovers after a restart.
#[tokio::test]
async fn c08_backend_down_fails_fast_with_redis_error() {
    let mut server = RedisServer::start();
    let a = manager(&server).await;
    acquire_and_release(&a, "down", &opts(1000, 0), "while up").await;
    server.stop();

    let (err, elapsed) =
        timed_failure(a.acquire("down", &opts(1000, 3000)), "server stopped").await;
    assert!(err.is_redis(), "expected Redis(..), got {err:?}");
    assert!(!err.is_contended());
    assert!(elapsed < Duration::from_secs(2), "took {elapsed:?}");

    let (err, elapsed) =
        timed_failure(a.try_acquire("down", &opts(1000, 3000)), "server stopped").await;
    assert!(err.is_redis(), "got {err:?}");
    assert!(elapsed < Duration::from_secs(2));

    // A manager cannot even be built against a stopped server, and says so quickly.
    let (err, elapsed) = timed_failure(LockManager::connect(&server.url()), "server stopped").await;
    assert!(matches!(err, LockError::Redis(_)), "got {err:?}");
    assert!(elapsed < Duration::from_secs(2));

    // After a restart on the same port the existing manager reconnects (bounded retries).
    server.restart();
    let mut recovered = None;
    for _ in 0..40 {
        match a.acquire("down", &opts(1000, 0)).await {
            Ok(g) => {
                recovered = Some(g);
                break;
            }
            Err(e) => assert!(e.is_redis(), "only Redis errors while reconnecting: {e:?}"),
        }
        sleep(Duration::from_millis(50)).await;
    }
    recovered
        .expect("the manager reconnects after a restart")
        .release()
        .await
        .expect("release after restart");
}

/// Unresponsive variant: Redis keeps the connection but answers nothing for 1.5 s. An
/// acquire with a 3 s wait and the default 500 ms response timeout fails with `Redis(..)` while
/// Redis is still silent (about one timeout for the `SET`, one for its cleanup), not
/// `Contended` after 3 s; and it leaves no lock behind once Redis answers.
#[tokio::test]
async fn c08_unresponsive_backend_fails_fast_with_redis_error() {
    let (_server, a, mut raw) = start_with_manager().await;
    acquire_and_release(&a, "warm-up", &opts(1000, 0), "warm-up").await;

    pause_all_clients(&mut raw, 1500).await;
    let (err, elapsed) = timed_failure(a.acquire("stuck", &opts(30_000, 3000)), "no answer").await;
    assert!(err.is_redis(), "expected Redis(..), got {err:?}");
    assert!(elapsed < Duration::from_millis(1400), "took {elapsed:?}");

    // Once Redis answers again, the SET and its cleanup run in order: no orphan.
    assert_set_ran_then_key_gone(
        &mut raw,
        &full("stuck"),
        2,
        "the unanswered acquire's cleanup",
    )
    .await;
}
