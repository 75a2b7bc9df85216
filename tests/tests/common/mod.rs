//! Helpers shared by the integration test binaries: a real `redis-server` per test (through
//! `lockcore_tests::RedisServer`), managers, and raw-connection probes for assertions.
//!
//! Every binary uses only part of this module.
#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use lockcore::{LockError, LockManager, LockManagerBuilder, LockOptions};
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

/// `GET counter` → 1 ms pause → `SET counter value+1`: a lost update whenever two of these
/// interleave.
pub async fn non_atomic_increment(con: &mut MultiplexedConnection) {
    let value: Option<i64> = query(con, redis::cmd("GET").arg("counter")).await;
    tokio::time::sleep(Duration::from_millis(1)).await;
    let _: () = query(
        con,
        redis::cmd("SET").arg("counter").arg(value.unwrap_or(0) + 1),
    )
    .await;
}

/// The value [`non_atomic_increment`] counts up, read on a connection of its own.
pub async fn counter_value(server: &RedisServer) -> i64 {
    query(
        &mut server.connection().await,
        redis::cmd("GET").arg("counter"),
    )
    .await
}

/// Runs `cmd` on a raw connection, or panics naming the command and its arguments.
pub async fn query<T: redis::FromRedisValue>(
    con: &mut MultiplexedConnection,
    cmd: &redis::Cmd,
) -> T {
    cmd.query_async(con).await.unwrap_or_else(|e| {
        let words: Vec<String> = cmd
            .args_iter()
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                _ => "<cursor>".to_owned(),
            })
            .collect();
        panic!("{}: {e}", words.join(" "))
    })
}

/// `GET key` on a raw connection.
pub async fn get(con: &mut MultiplexedConnection, key: &str) -> Option<String> {
    query(con, redis::cmd("GET").arg(key)).await
}

/// `PTTL key`: -2 when missing, -1 when no expiry.
pub async fn pttl(con: &mut MultiplexedConnection, key: &str) -> i64 {
    query(con, redis::cmd("PTTL").arg(key)).await
}

/// `EXISTS key`.
pub async fn exists(con: &mut MultiplexedConnection, key: &str) -> bool {
    query::<i64>(con, redis::cmd("EXISTS").arg(key)).await == 1
}

/// `DEL key` (the "by hand" delete of the cases).
pub async fn del(con: &mut MultiplexedConnection, key: &str) {
    let _: i64 = query(con, redis::cmd("DEL").arg(key)).await;
}

/// `SET key value PX px`: another holder's key (or an old token), put there by hand.
pub async fn set_px(con: &mut MultiplexedConnection, key: &str, value: &str, px: u64) {
    let _: () = query(con, redis::cmd("SET").arg(key).arg(value).arg("PX").arg(px)).await;
}

/// The naive lock a client without lockcore would take: `SET key token NX PX px`. Returned
/// unsent, so that the caller decides how (and how long) to wait for the reply.
pub fn naive_set_nx(key: &str, token: &str, px: u64) -> redis::Cmd {
    let mut set = redis::cmd("SET");
    set.arg(key).arg(token).arg("NX").arg("PX").arg(px);
    set
}

/// The fencing counter's value (0 when unset).
pub async fn acquisitions_seen_by_redis(con: &mut MultiplexedConnection) -> u64 {
    let v: Option<u64> = query(con, redis::cmd("GET").arg(fencing_counter_key())).await;
    v.unwrap_or(0)
}

/// `CLIENT PAUSE ms ALL`: when this returns, Redis holds back every client's commands (ours
/// included) for `ms`. Commands already sent are run, in order, once the pause ends. This is the
/// synchronous way to make a reply arrive "late" (a `DEBUG SLEEP` gives no signal that it started).
pub async fn pause_all_clients(con: &mut MultiplexedConnection, ms: u64) {
    let _: () = query(con, redis::cmd("CLIENT").arg("PAUSE").arg(ms).arg("ALL")).await;
}

/// `SCRIPT FLUSH`: the next `EVALSHA` of every script gets `NOSCRIPT`.
pub async fn script_flush(con: &mut MultiplexedConnection) {
    let _: () = query(con, redis::cmd("SCRIPT").arg("FLUSH")).await;
}

/// Sum of `calls` per command from `INFO commandstats`, without `info` itself, and the calls
/// per command.
pub fn parse_commandstats(info: &str) -> (u64, std::collections::BTreeMap<String, u64>) {
    let mut per_command = std::collections::BTreeMap::new();
    for line in info.lines() {
        let Some(rest) = line.strip_prefix("cmdstat_") else {
            continue;
        };
        let Some((name, fields)) = rest.split_once(':') else {
            continue;
        };
        if name == "info" {
            continue;
        }
        let calls = fields
            .split(',')
            .find_map(|f| f.strip_prefix("calls="))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        per_command.insert(name.to_owned(), calls);
    }
    (per_command.values().sum(), per_command)
}

/// Polls `EXISTS key` every 20 ms, for at most ~1 s (there is no signal for a server-side state
/// change), until the key shows up: `true` if it did.
pub async fn appears_within_a_second(con: &mut MultiplexedConnection, key: &str) -> bool {
    for _ in 0..50 {
        if exists(con, key).await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// Polls (every 20 ms, at most ~1 s: there is no signal for server-side state) until the
/// fencing counter shows `applied` acquisitions (a paused `SET` ran) and `key` is absent
/// (its cleanup ran after it). `what` names the scenario in the failure message.
pub async fn assert_set_ran_then_key_gone(
    con: &mut MultiplexedConnection,
    key: &str,
    applied: u64,
    what: &str,
) {
    for _ in 0..50 {
        if acquisitions_seen_by_redis(con).await >= applied && !exists(con, key).await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!(
        "{what}: ~1 s later: {} acquisitions seen (expected {applied}), key value {:?}, pttl {}",
        acquisitions_seen_by_redis(con).await,
        get(con, key).await,
        pttl(con, key).await
    );
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
///
/// `tracing` caches per call site whether any subscriber is interested. With only
/// thread-scoped subscribers, a call site first hit on a thread without one can be cached as
/// "never" while another test's capture is being installed, and its events are then lost. So
/// the first capture also installs a global subscriber that records nothing but keeps every
/// call site's interest at "sometimes": each event then asks the current thread's subscriber.
#[derive(Debug, Clone)]
pub struct CapturedEvents(std::sync::Arc<std::sync::Mutex<Vec<(tracing::Level, String)>>>);

impl Default for CapturedEvents {
    fn default() -> Self {
        static GLOBAL: std::sync::Once = std::sync::Once::new();
        GLOBAL.call_once(|| {
            // Fails only if a global subscriber is already set, which is just as good.
            let _ = tracing::subscriber::set_global_default(AlwaysAsk);
        });
        CapturedEvents(std::sync::Arc::default())
    }
}

/// Records nothing; answers "sometimes" for every call site (see [`CapturedEvents`]).
struct AlwaysAsk;

impl tracing::Subscriber for AlwaysAsk {
    fn register_callsite(
        &self,
        _: &'static tracing::Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        tracing::subscriber::Interest::sometimes()
    }
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        false
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, _: &tracing::Event<'_>) {}
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

impl CapturedEvents {
    /// Every event at `level` so far, rendered as `name=value` pairs.
    pub fn at(&self, level: tracing::Level) -> Vec<String> {
        self.0
            .lock()
            .unwrap_or_else(|e| panic!("captured events: {e}"))
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
    fn register_callsite(
        &self,
        _: &'static tracing::Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        tracing::subscriber::Interest::sometimes()
    }
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
            .unwrap_or_else(|e| panic!("captured events: {e}"))
            .push((*event.metadata().level(), text.0));
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}
