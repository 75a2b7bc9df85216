//! Managers and runtimes the tests build: a [`LockManager`] on a [`RedisServer`], option
//! shorthands, acquire-or-panic helpers, and names for what lockcore returns (full keys,
//! error variants, token format).

use std::time::Duration;

use lockcore::{LockError, LockManager, LockManagerBuilder, LockOptions};
use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

use crate::{RedisCluster, RedisServer};

/// The manager's full key for a user key under the default prefix.
pub fn full(key: &str) -> String {
    format!("{}{key}", lockcore::DEFAULT_KEY_PREFIX)
}

/// The fencing counter the acquire script increments (one per prefix). Its value counts the
/// acquisitions that reached Redis, including those whose reply was never read.
pub fn fencing_counter_key() -> String {
    full("__fencing_counter__")
}

/// A manager on `server` with the default options.
pub async fn manager(server: &RedisServer) -> LockManager {
    LockManager::connect(&server.url())
        .await
        .unwrap_or_else(|e| panic!("connect to {}: {e}\nlog:\n{}", server.url(), server.log()))
}

/// A manager on `server` set up by `configure` (given a builder that has the URL already).
pub async fn manager_with(
    server: &RedisServer,
    configure: impl FnOnce(LockManagerBuilder) -> LockManagerBuilder,
) -> LockManager {
    configure(LockManager::builder().url(server.url()))
        .build()
        .await
        .unwrap_or_else(|e| panic!("connect to {}: {e}", server.url()))
}

/// A manager on `cluster` (through its seed nodes) with the default options.
pub async fn cluster_manager(cluster: &RedisCluster) -> LockManager {
    LockManager::builder()
        .cluster(cluster.seed_urls())
        .build()
        .await
        .unwrap_or_else(|e| panic!("cluster manager: {e}\n{}", cluster.log()))
}

/// A manager with a short response timeout (for lost-reply tests).
pub async fn manager_with_timeout(server: &RedisServer, response_timeout: Duration) -> LockManager {
    manager_with(server, |builder| builder.response_timeout(response_timeout)).await
}

/// A fresh server, a manager on it with the default options, and a raw connection for probes.
/// Bind the server to a name (`_server` if unused), not `_`: dropping it stops Redis.
pub async fn start_with_manager() -> (RedisServer, LockManager, MultiplexedConnection) {
    let server = RedisServer::start();
    let manager = manager(&server).await;
    let raw = server.connection().await;
    (server, manager, raw)
}

/// A current-thread runtime of the test's own (with time and I/O).
pub fn current_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"))
}

/// A multi-thread runtime with `workers` worker threads (with time and I/O).
pub fn multi_thread_runtime(workers: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"))
}

/// `ttl` and `wait` in milliseconds, default retry policy.
pub fn opts(ttl_ms: u64, wait_ms: u64) -> LockOptions {
    LockOptions::new(Duration::from_millis(ttl_ms)).wait(Duration::from_millis(wait_ms))
}

/// Acquire or panic with the error.
pub async fn must_acquire(
    manager: &LockManager,
    key: &str,
    opts: &LockOptions,
) -> lockcore::LockGuard {
    manager
        .acquire(key, opts)
        .await
        .unwrap_or_else(|e| panic!("acquire {key:?}: {e:?}"))
}

/// Awaits an attempt that must fail (`why` says why it cannot succeed); returns its error and
/// how long the attempt took.
pub async fn timed_failure<T: std::fmt::Debug>(
    attempt: impl Future<Output = Result<T, LockError>>,
    why: &str,
) -> (LockError, Duration) {
    let started = Instant::now();
    match attempt.await {
        Ok(unexpected) => panic!("{why}: {unexpected:?}"),
        Err(e) => (e, started.elapsed()),
    }
}

/// Acquire and release at once, or panic naming `what` (a warm-up that loads the scripts, or a
/// check that the manager works).
pub async fn acquire_and_release(manager: &LockManager, key: &str, opts: &LockOptions, what: &str) {
    must_acquire(manager, key, opts)
        .await
        .release()
        .await
        .unwrap_or_else(|e| panic!("{what}: {e:?}"));
}

/// Short description of an error's variant, for assertion messages.
pub fn variant(e: &LockError) -> &'static str {
    match e {
        LockError::Contended { .. } => "Contended",
        LockError::Lost { .. } => "Lost",
        LockError::Redis(_) => "Redis",
        LockError::InvalidKey { .. } => "InvalidKey",
        LockError::InvalidOptions { .. } => "InvalidOptions",
        LockError::NoDefaultManager => "NoDefaultManager",
        LockError::DefaultManagerAlreadySet => "DefaultManagerAlreadySet",
        _ => "other",
    }
}

/// `true` for a hyphenated UUID v4 (the token format: 128 random bits).
pub fn is_uuid_v4(token: &str) -> bool {
    let b = token.as_bytes();
    b.len() == 36
        && [8, 13, 18, 23].iter().all(|&i| b[i] == b'-')
        && b.iter()
            .enumerate()
            .all(|(i, c)| [8, 13, 18, 23].contains(&i) || c.is_ascii_hexdigit())
        && b[14] == b'4'
        && matches!(b[19], b'8' | b'9' | b'a' | b'b' | b'A' | b'B')
}
