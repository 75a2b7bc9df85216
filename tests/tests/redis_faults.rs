//! Redis faults: C06 (NOSCRIPT), C07 (lost acquire reply), C08 (backend down).

// Test helpers outside `#[test]` fns may panic on failure too (clippy's allow-*-in-tests
// covers only the test fns themselves).
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::*;
use lockcore::{LockError, LockManager};
use redis::aio::MultiplexedConnection;
use tokio::time::{Instant, sleep};

async fn script_flush(con: &mut MultiplexedConnection) {
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(con)
        .await
        .expect("SCRIPT FLUSH");
}

/// Polls (every 20 ms, at most ~1 s: there is no signal for server-side state) until the
/// fencing counter shows `applied` acquisitions (the paused `SET` ran) and `key` is absent.
async fn assert_set_ran_then_key_gone(con: &mut MultiplexedConnection, key: &str, applied: u64) {
    for _ in 0..50 {
        if acquisitions_seen_by_redis(con).await >= applied && !exists(con, key).await {
            return;
        }
        sleep(Duration::from_millis(20)).await;
    }
    panic!(
        "~1 s later: {} acquisitions seen (expected {applied}), key value {:?}, pttl {}",
        acquisitions_seen_by_redis(con).await,
        get(con, key).await,
        pttl(con, key).await
    );
}

// ---- C06: NOSCRIPT ----------------------------------------------------------------------------

/// C06: A holds `order:1`; after `SCRIPT FLUSH` the release succeeds (EVALSHA falls back to
/// EVAL), and so do the first acquire, extend and drop-release after a flush. No false `Lost`.
#[tokio::test]
async fn c06_release_after_script_flush_succeeds() {
    let server = RedisServer::start();
    let a = manager(&server).await;
    let b = manager(&server).await;
    let mut raw = server.connection().await;
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
    assert_eq!(get(&mut raw, &key).await.as_deref(), Some(guard.token()));

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

// ---- C07: an acquire whose reply is lost ------------------------------------------------------

/// C07: the `SET NX` reaches Redis but its reply comes after the client's 100 ms timeout
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
    must_acquire(&a, "warm-up", &opts(1000, 0))
        .await
        .release()
        .await
        .expect("warm-up");
    assert_eq!(acquisitions_seen_by_redis(&mut raw).await, 1);

    pause_all_clients(&mut raw, 400).await;
    let started = Instant::now();
    let err = a
        .acquire("order:7", &opts(30_000, 0))
        .await
        .expect_err("the reply cannot arrive within 100 ms");
    assert!(err.is_redis(), "a lost reply is a Redis error, got {err:?}");
    assert!(
        started.elapsed() < Duration::from_millis(400),
        "the acquire must give up on its timeout, not wait for the reply ({:?})",
        started.elapsed()
    );

    let error_at = Instant::now();
    assert_set_ran_then_key_gone(&mut raw, &key, 2).await;
    assert!(error_at.elapsed() <= Duration::from_millis(1100));

    // The manager still works once Redis answers again.
    must_acquire(&a, "order:7", &opts(1000, 0))
        .await
        .release()
        .await
        .expect("after the fault");
}

/// C07 twin: the naive `SET key token NX PX 30000` sent with a 100 ms timeout under the same
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
    let naive_set: redis::RedisResult<Option<String>> = redis::cmd("SET")
        .arg(&key)
        .arg("naive-token")
        .arg("NX")
        .arg("PX")
        .arg(30_000)
        .query_async(&mut naive)
        .await;
    let err = naive_set.expect_err("the reply cannot arrive within 100 ms");
    assert!(err.is_timeout(), "got {err}");

    let mut orphan = false;
    for _ in 0..50 {
        if exists(&mut raw, &key).await {
            orphan = true;
            break;
        }
        sleep(Duration::from_millis(20)).await;
    }
    assert!(orphan, "the naive SET was applied after the pause");
    assert_eq!(get(&mut raw, &key).await.as_deref(), Some("naive-token"));
    assert!(
        pttl(&mut raw, &key).await > 25_000,
        "nobody knows about this lock for 30 s"
    );
}

// ---- C08: backend down ------------------------------------------------------------------------

/// C08: Redis stopped, acquire with a 3 s wait: a `Redis(..)` error within about one connection
/// timeout (well under 2 s), never `Contended` after 3 s. The manager recovers after a restart.
#[tokio::test]
async fn c08_backend_down_fails_fast_with_redis_error() {
    let mut server = RedisServer::start();
    let a = manager(&server).await;
    must_acquire(&a, "down", &opts(1000, 0))
        .await
        .release()
        .await
        .expect("while up");
    server.stop();

    let started = Instant::now();
    let err = a
        .acquire("down", &opts(1000, 3000))
        .await
        .expect_err("server stopped");
    let elapsed = started.elapsed();
    assert!(err.is_redis(), "expected Redis(..), got {err:?}");
    assert!(!err.is_contended());
    assert!(elapsed < Duration::from_secs(2), "took {elapsed:?}");

    let started = Instant::now();
    let err = a
        .try_acquire("down", &opts(1000, 3000))
        .await
        .expect_err("server stopped");
    assert!(err.is_redis(), "got {err:?}");
    assert!(started.elapsed() < Duration::from_secs(2));

    // A manager cannot even be built against a stopped server, and says so quickly.
    let started = Instant::now();
    let built = LockManager::connect(&server.url()).await;
    assert!(matches!(built, Err(LockError::Redis(_))), "got {built:?}");
    assert!(started.elapsed() < Duration::from_secs(2));

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

/// C08, unresponsive variant: Redis keeps the connection but answers nothing for 1.5 s. An
/// acquire with a 3 s wait and the default 500 ms response timeout fails with `Redis(..)` while
/// Redis is still silent (about one timeout for the `SET`, one for its cleanup), not
/// `Contended` after 3 s; and it leaves no lock behind once Redis answers.
#[tokio::test]
async fn c08_unresponsive_backend_fails_fast_with_redis_error() {
    let server = RedisServer::start();
    let a = manager(&server).await;
    let mut raw = server.connection().await;
    must_acquire(&a, "warm-up", &opts(1000, 0))
        .await
        .release()
        .await
        .expect("warm-up");

    pause_all_clients(&mut raw, 1500).await;
    let started = Instant::now();
    let err = a
        .acquire("stuck", &opts(30_000, 3000))
        .await
        .expect_err("no answer");
    let elapsed = started.elapsed();
    assert!(err.is_redis(), "expected Redis(..), got {err:?}");
    assert!(elapsed < Duration::from_millis(1400), "took {elapsed:?}");

    // Once Redis answers again, the SET and its cleanup run in order: no orphan.
    assert_set_ran_then_key_gone(&mut raw, &full("stuck"), 2).await;
}
