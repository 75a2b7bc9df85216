//! What a new user meets first: `LockManager::close` for a graceful shutdown, the first acquire
//! after `build()` costing one round trip, a `redis::Client` the application already has, and
//! errors that name the node they came from.

use std::time::Duration;

use lockcore::{LockError, LockManager, LockOptions};
use lockcore_tests::monitor::{MonitorStream, Source, parse_line};
use lockcore_tests::*;
use tokio::time::Instant;

fn held(ttl_ms: u64) -> LockOptions {
    LockOptions::new(Duration::from_millis(ttl_ms)).wait(Duration::ZERO)
}

/// `close()` releases every live guard (the keys are gone at once, not after their TTL), stops
/// the watchdog and the hand-off listener, ends a waiting acquire, and refuses later acquires;
/// the guards' own releases are then `Ok` without a network call. A second close is a no-op.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_releases_every_live_guard_and_stops_the_manager() {
    let server = RedisServer::start();
    let mut raw = server.connection().await;
    let (locks, channel) = manager_with_channel(&server, &mut raw).await;
    let other = manager(&server).await;
    let plain = must_acquire(&locks, "close:a", &held(60_000)).await;
    let watched = must_acquire(&locks, "close:b", &held(3_000).watchdog(true)).await;
    assert_eq!(locks.live_renewals(), 1);
    let contended = must_acquire(&other, "close:c", &held(60_000)).await;
    let waiting = {
        let locks = locks.clone();
        tokio::spawn(async move {
            locks
                .acquire(
                    "close:c",
                    &LockOptions::new(Duration::from_secs(60)).wait(Duration::from_secs(30)),
                )
                .await
        })
    };
    wait_queue_len(&mut raw, 1).await;

    let started = Instant::now();
    locks.close().await.unwrap_or_else(|e| panic!("close: {e}"));
    assert!(
        !exists(&mut raw, &full("close:a")).await,
        "close released close:a"
    );
    assert!(
        !exists(&mut raw, &full("close:b")).await,
        "close released close:b"
    );
    assert!(!plain.is_held() && !watched.is_held());
    tokio::time::timeout(Duration::from_secs(1), watched.lost())
        .await
        .unwrap_or_else(|_| panic!("lost() completes once the key was released"));
    let ended = tokio::time::timeout(Duration::from_secs(2), waiting)
        .await
        .unwrap_or_else(|_| panic!("the waiting acquire ends at once"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(ended, Err(LockError::Closed)), "{ended:?}");
    assert!(started.elapsed() < Duration::from_secs(2));
    let deadline = Instant::now() + Duration::from_secs(2);
    while locks.live_renewals() > 0 || numsub(&mut raw, &channel).await > 0 {
        assert!(
            Instant::now() < deadline,
            "the watchdog and the listener stop"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let later = locks.acquire("close:d", &held(1_000)).await;
    assert!(matches!(later, Err(LockError::Closed)), "{later:?}");
    let later = locks.try_acquire("close:d", &held(1_000)).await;
    assert!(matches!(later, Err(LockError::Closed)), "{later:?}");
    assert!(!exists(&mut raw, &full("close:d")).await);
    assert!(
        plain.release().await.is_ok(),
        "a guard closed by its manager releases Ok"
    );
    assert!(watched.release().await.is_ok());
    assert!(locks.close().await.is_ok(), "a second close is a no-op");
    // The other manager is untouched, and the waiter left the queue.
    assert!(contended.is_held());
    assert!(contended.release().await.is_ok());
    assert!(
        queue_gone_within(&mut raw, Duration::from_secs(1))
            .await
            .is_some()
    );
}

/// Twin: without `close`, a guard still alive when its runtime shuts down (as `main` returns)
/// leaves its key until the TTL: no runtime is left to run its release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_close_a_guard_outliving_its_runtime_leaves_the_key() {
    let server = RedisServer::start();
    let mut raw = server.connection().await;
    let url = server.url();
    for close in [false, true] {
        let key = if close {
            "shutdown:closed"
        } else {
            "shutdown:plain"
        };
        let url = url.clone();
        tokio::task::spawn_blocking(move || {
            let runtime = current_thread_runtime();
            let guard = runtime.block_on(async {
                let locks = LockManager::connect(&url)
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
                let guard = must_acquire(&locks, key, &held(60_000)).await;
                if close {
                    locks.close().await.unwrap_or_else(|e| panic!("{e}"));
                }
                guard
            });
            // `main` returns: the runtime goes first, then the guard.
            drop(runtime);
            drop(guard);
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        let left = exists(&mut raw, &full(key)).await;
        assert_eq!(left, !close, "{key}: left behind {left}");
    }
}

/// The first acquire after `build()` is one script call: everything else a manager needs (its
/// connection, the scripts, the wake-up subscription) was opened when it was built.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_acquire_costs_one_round_trip() {
    let server = RedisServer::start();
    let locks = manager(&server).await;
    // Connected before MONITOR starts: a new connection's own `CLIENT SETINFO` (Valkey shows
    // it) is not the acquire's.
    let mut raw = server.connection().await;
    let port = server.port();
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<()>();
    let seen = tokio::task::spawn_blocking(move || {
        let mut monitor = MonitorStream::connect(port, Duration::from_secs(2));
        let _ = ready_tx.send(());
        let mut commands = Vec::new();
        // Bounded: the test sends its end marker right after the acquire.
        for _ in 0..1_000 {
            let Some(line) = monitor.next_raw().and_then(|l| parse_line(l.as_bytes())) else {
                break;
            };
            if line.command == "ECHO" && line.args.contains("first-acquire-done") {
                break;
            }
            if line.source == Source::Client {
                commands.push(line.command);
            }
        }
        commands
    });
    ready_rx
        .await
        .unwrap_or_else(|e| panic!("MONITOR is up: {e}"));
    let started = Instant::now();
    let guard = must_acquire(&locks, "first", &held(10_000)).await;
    let took = started.elapsed();
    let _: String = query(&mut raw, &cmd(&["ECHO", "first-acquire-done"])).await;
    let commands = seen.await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(commands, ["EVALSHA"], "the first acquire sent {commands:?}");
    assert!(
        took < Duration::from_millis(50),
        "the first acquire took {took:?}"
    );
    assert!(guard.release().await.is_ok());
}

/// A `redis::Client` the application already has serves as the manager's node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_builder_takes_an_existing_redis_client() {
    let server = RedisServer::start_with_args(&["--requirepass", "cl1ent-s3cret"]);
    let client = redis::Client::open(format!(
        "redis://:cl1ent-s3cret@127.0.0.1:{}/",
        server.port()
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    let builder = LockManager::builder().client(client.clone());
    let shown = format!("{builder:?}");
    assert!(!shown.contains("cl1ent-s3cret"), "{shown}");
    assert!(
        shown.contains(&format!("127.0.0.1:{}", server.port())),
        "{shown}"
    );
    let locks = builder.build().await.unwrap_or_else(|e| panic!("{e}"));
    let other = LockManager::builder()
        .client(client)
        .build()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let guard = must_acquire(&locks, "client:1", &held(10_000)).await;
    let queued = {
        let other = other.clone();
        tokio::spawn(async move {
            other
                .acquire(
                    "client:1",
                    &LockOptions::new(Duration::from_secs(5)).wait(Duration::from_secs(5)),
                )
                .await
        })
    };
    let mut raw = redis::Client::open(format!(
        "redis://:cl1ent-s3cret@127.0.0.1:{}/",
        server.port()
    ))
    .unwrap_or_else(|e| panic!("{e}"))
    .get_multiplexed_async_connection()
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    wait_queue_len(&mut raw, 1).await;
    assert!(guard.release().await.is_ok());
    let handed = queued
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|e| panic!("the second manager's waiter is handed the lock: {e}"));
    assert!(handed.release().await.is_ok());
}

/// A client that turns certificate checks off is refused, whatever features are on.
#[tokio::test(flavor = "current_thread")]
async fn a_client_without_certificate_checks_is_refused() {
    let port = free_port();
    let client = redis::Client::open(format!("rediss://127.0.0.1:{port}/#insecure"))
        .unwrap_or_else(|e| panic!("{e}"));
    let built = LockManager::builder().client(client).build().await;
    assert!(
        matches!(&built, Err(LockError::InvalidOptions { reason }) if reason.contains("insecure")),
        "{built:?}"
    );
}

/// A Redis error names the node it came from (its address, never the password): at connect
/// time and for a command a node refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_name_the_node_they_came_from() {
    let port = free_port();
    let refused = LockManager::connect(&format!("redis://app:n0de-s3cret@127.0.0.1:{port}/"))
        .await
        .err()
        .unwrap_or_else(|| panic!("nothing listens on {port}"));
    let text = refused.to_string();
    assert!(refused.is_redis(), "{refused:?}");
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    assert!(!text.contains("n0de-s3cret"), "{text}");

    let (server, locks, mut raw) = start_with_manager().await;
    set_px(&mut raw, &fencing_counter_key(), "not a number", 60_000).await;
    let failed = locks.acquire("named", &held(1_000)).await;
    let Err(LockError::Redis(error)) = &failed else {
        panic!("a counter that is not a number fails the acquire: {failed:?}");
    };
    let text = failed
        .as_ref()
        .err()
        .map(ToString::to_string)
        .unwrap_or_default();
    assert!(
        text.contains(&format!("127.0.0.1:{}", server.port())),
        "{text}"
    );
    assert!(
        text.contains("not an integer"),
        "the server's own words stay: {text}"
    );
    assert!(
        error.code().is_some() || error.kind() != redis::ErrorKind::Io,
        "{error:?}"
    );
}
