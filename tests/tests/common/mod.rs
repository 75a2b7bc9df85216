//! Helpers shared by the integration test binaries: a real `redis-server` per test (through
//! `lockcore_tests::RedisServer`), managers, and raw-connection probes for assertions.
//!
//! Every binary uses only part of this module.
#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use lockcore::{LockError, LockManager, LockOptions};
pub use lockcore_tests::RedisServer;
use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

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

/// A manager with a short response timeout (for lost-reply tests).
pub async fn manager_with_timeout(server: &RedisServer, response_timeout: Duration) -> LockManager {
    LockManager::builder()
        .url(server.url())
        .response_timeout(response_timeout)
        .build()
        .await
        .unwrap_or_else(|e| panic!("connect to {}: {e}", server.url()))
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

/// `GET key` on a raw connection.
pub async fn get(con: &mut MultiplexedConnection, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query_async(con)
        .await
        .unwrap_or_else(|e| panic!("GET {key:?}: {e}"))
}

/// `PTTL key`: -2 when missing, -1 when no expiry.
pub async fn pttl(con: &mut MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("PTTL")
        .arg(key)
        .query_async(con)
        .await
        .unwrap_or_else(|e| panic!("PTTL {key:?}: {e}"))
}

/// `EXISTS key`.
pub async fn exists(con: &mut MultiplexedConnection, key: &str) -> bool {
    let n: i64 = redis::cmd("EXISTS")
        .arg(key)
        .query_async(con)
        .await
        .unwrap_or_else(|e| panic!("EXISTS {key:?}: {e}"));
    n == 1
}

/// `DEL key` (the "by hand" delete of the cases).
pub async fn del(con: &mut MultiplexedConnection, key: &str) {
    let _: i64 = redis::cmd("DEL")
        .arg(key)
        .query_async(con)
        .await
        .unwrap_or_else(|e| panic!("DEL {key:?}: {e}"));
}

/// The fencing counter's value (0 when unset).
pub async fn acquisitions_seen_by_redis(con: &mut MultiplexedConnection) -> u64 {
    let v: Option<u64> = redis::cmd("GET")
        .arg(fencing_counter_key())
        .query_async(con)
        .await
        .unwrap_or_else(|e| panic!("GET fencing counter: {e}"));
    v.unwrap_or(0)
}

/// `CLIENT PAUSE ms ALL`: when this returns, Redis holds back every client's commands (ours
/// included) for `ms`. Commands already sent are run, in order, once the pause ends. This is the
/// synchronous way to make a reply arrive "late" (a `DEBUG SLEEP` gives no signal that it started).
pub async fn pause_all_clients(con: &mut MultiplexedConnection, ms: u64) {
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(ms)
        .arg("ALL")
        .query_async(con)
        .await
        .unwrap_or_else(|e| panic!("CLIENT PAUSE: {e}"));
}

/// Polls `EXISTS key` every `step` until the key is gone, for at most `within` (bounded: there
/// is no signal for a server-side state change). Returns how long it took, or `None` if the key
/// was still there at the end.
pub async fn gone_within(
    con: &mut MultiplexedConnection,
    key: &str,
    within: Duration,
    step: Duration,
) -> Option<Duration> {
    let start = Instant::now();
    let rounds = within.as_micros() / step.as_micros().max(1) + 1;
    for _ in 0..rounds {
        if !exists(con, key).await {
            return Some(start.elapsed());
        }
        tokio::time::sleep(step).await;
    }
    if exists(con, key).await {
        None
    } else {
        Some(start.elapsed())
    }
}

/// Asserts that `key` disappears within `within` (polling every 5 ms).
pub async fn assert_gone_within(con: &mut MultiplexedConnection, key: &str, within: Duration) {
    let took = gone_within(con, key, within, Duration::from_millis(5)).await;
    assert!(
        took.is_some(),
        "key {key:?} still exists {within:?} later (value {:?}, pttl {})",
        get(con, key).await,
        pttl(con, key).await
    );
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

/// `true` for a hyphenated UUID v4 (the token format the design fixes: 128 random bits).
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

/// Captures `tracing` events (level and rendered fields) for assertions about what lockcore
/// reports. Install it for the current thread with `tracing::subscriber::set_default` or
/// `with_default`; on a current_thread runtime that covers every task.
#[derive(Debug, Clone, Default)]
pub struct CapturedEvents(std::sync::Arc<std::sync::Mutex<Vec<(tracing::Level, String)>>>);

impl CapturedEvents {
    /// Every event at `level` so far, rendered as `name=value` pairs.
    pub fn at(&self, level: tracing::Level) -> Vec<String> {
        self.0
            .lock()
            .expect("captured events")
            .iter()
            .filter(|(l, _)| *l == level)
            .map(|(_, text)| text.clone())
            .collect()
    }
}

struct Render(String);

impl tracing::field::Visit for Render {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!("{}={:?} ", field.name(), value));
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.push_str(&format!("{}={} ", field.name(), value));
    }
}

impl tracing::Subscriber for CapturedEvents {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut text = Render(String::new());
        event.record(&mut text);
        self.0
            .lock()
            .expect("captured events")
            .push((*event.metadata().level(), text.0));
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}
