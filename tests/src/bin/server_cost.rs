//! Server-side work of lockcore's calls: the driver that `.ci/cost-guard` runs against a
//! `redis-server` (or `valkey-server`) started under `valgrind --tool=callgrind`.
//!
//! `server_cost URL MODE N` runs `N` sequential rounds of `MODE` on the server at `URL` (after
//! the same warm-up for every `N`) and prints `server_cost: mode=MODE rounds=N`. The guard
//! counts the server's instructions at two values of `N` on fresh servers; the difference
//! divided by the difference of `N` is the cost of one round, start-up and warm-up cancelled.
//!
//! | MODE | one round |
//! |---|---|
//! | `lock` | an uncontended `acquire` + `release` (default options: fencing per prefix, hand-off on) |
//! | `lock-off` | the same with `FencingCounter::Off` |
//! | `floor` | `SET key token NX PX 10000` and an `EVALSHA` compare-and-delete: the least a lock client sends |
//! | `fenced-floor` | an `EVALSHA` of `SET NX PX` + `INCR`, and the same compare-and-delete |
//! | `contended` | A acquires, B's acquire queues behind it, A's release hands the key to B, B releases: one contended acquisition and the uncontended pair around it |
//!
//! The driver itself sends nothing else to the server: in `contended`, B is known to be queued
//! from lockcore's own debug event ("lock contended; waiting", logged once per call when an attempt finds
//! the key held), caught by a tracing layer, not from a polling command that would be counted.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use lockcore::{FencingCounter, LockManager, LockOptions};
use tokio::sync::Notify;
use tracing::Subscriber;
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::prelude::*;

/// Warm-up rounds before the measured ones (connections, script loads, allocator pools).
const WARM_UP: usize = 50;

/// A lease long enough that nothing expires during a run under callgrind.
const TTL: Duration = Duration::from_secs(60);

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(url), Some(mode), Some(rounds)) = (args.next(), args.next(), args.next()) else {
        eprintln!("usage: server_cost URL lock|lock-off|floor|fenced-floor|contended N");
        std::process::exit(2);
    };
    let rounds: usize = rounds
        .parse()
        .unwrap_or_else(|_| panic!("N must be a number, not {rounds:?}"));
    let held = Arc::new(Notify::new());
    tracing_subscriber::registry()
        .with(HeldSignal(Arc::clone(&held)))
        .init();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|err| panic!("tokio runtime: {err}"));
    runtime.block_on(async {
        let mut key = String::with_capacity(32);
        match mode.as_str() {
            "lock" | "lock-off" => {
                let counter = if mode == "lock" {
                    FencingCounter::default()
                } else {
                    FencingCounter::Off
                };
                let locks = manager(&url, counter).await;
                let opts = LockOptions::new(TTL);
                run_lock(&locks, &opts, &mut key, "warm", WARM_UP).await;
                run_lock(&locks, &opts, &mut key, "cost", rounds).await;
                close(&locks).await;
            }
            "floor" | "fenced-floor" => {
                let fenced = mode == "fenced-floor";
                let client =
                    redis::Client::open(url.as_str()).unwrap_or_else(|err| panic!("client: {err}"));
                let mut conn = client
                    .get_multiplexed_async_connection()
                    .await
                    .unwrap_or_else(|err| panic!("connection: {err}"));
                run_floor(&mut conn, fenced, &mut key, "warm", WARM_UP).await;
                run_floor(&mut conn, fenced, &mut key, "cost", rounds).await;
            }
            "contended" => {
                let a = manager(&url, FencingCounter::default()).await;
                let b = manager(&url, FencingCounter::default()).await;
                run_contended(&a, &b, &held, &mut key, "warm", WARM_UP).await;
                run_contended(&a, &b, &held, &mut key, "cost", rounds).await;
                close(&a).await;
                close(&b).await;
            }
            other => panic!("unknown mode {other:?}"),
        }
    });
    println!("server_cost: mode={mode} rounds={rounds}");
}

async fn manager(url: &str, counter: FencingCounter) -> LockManager {
    LockManager::builder()
        .url(url)
        .fencing_counter(counter)
        // Generous: every server call runs tens of times slower under callgrind.
        .response_timeout(Duration::from_secs(30))
        .connection_timeout(Duration::from_secs(30))
        .build()
        .await
        .unwrap_or_else(|err| panic!("manager: {err}"))
}

async fn close(locks: &LockManager) {
    locks
        .close()
        .await
        .unwrap_or_else(|err| panic!("close: {err}"));
}

fn next_key<'k>(key: &'k mut String, tag: &str, i: usize) -> &'k str {
    key.clear();
    let _ = write!(key, "{tag}:{i}");
    key
}

/// `n` sequential uncontended acquire + release pairs on distinct keys.
async fn run_lock(locks: &LockManager, opts: &LockOptions, key: &mut String, tag: &str, n: usize) {
    for i in 0..n {
        let key = next_key(key, tag, i);
        let guard = locks
            .acquire(key, opts)
            .await
            .unwrap_or_else(|err| panic!("acquire {key}: {err}"));
        guard
            .release()
            .await
            .unwrap_or_else(|err| panic!("release {key}: {err}"));
    }
}

/// `n` contended acquisitions: A holds, B queues (known from lockcore's "lock held" event), A's
/// release hands the key to B, B releases.
async fn run_contended(
    a: &LockManager,
    b: &LockManager,
    held: &Notify,
    key: &mut String,
    tag: &str,
    n: usize,
) {
    let opts = LockOptions::new(TTL).wait(Duration::from_secs(120));
    for i in 0..n {
        let key = next_key(key, tag, i);
        let first = a
            .acquire(key, &opts)
            .await
            .unwrap_or_else(|err| panic!("A acquire {key}: {err}"));
        let waiter = b.acquire(key, &opts);
        tokio::pin!(waiter);
        let queued = held.notified();
        tokio::pin!(queued);
        tokio::select! {
            biased;
            () = &mut queued => {}
            result = &mut waiter => panic!("B acquired {key} while A held it: {result:?}"),
        }
        let (released, second) = tokio::join!(first.release(), waiter);
        released.unwrap_or_else(|err| panic!("A release {key}: {err}"));
        let second = second.unwrap_or_else(|err| panic!("B acquire {key}: {err}"));
        second
            .release()
            .await
            .unwrap_or_else(|err| panic!("B release {key}: {err}"));
    }
}

/// `n` sequential floor pairs without lockcore.
async fn run_floor(
    conn: &mut redis::aio::MultiplexedConnection,
    fenced: bool,
    key: &mut String,
    tag: &str,
    n: usize,
) {
    let release = redis::Script::new(lockcore_tests::lua::COMPARE_AND_DELETE);
    let acquire = redis::Script::new(lockcore_tests::lua::SET_NX_INCR);
    let ttl_ms = u64::try_from(TTL.as_millis()).unwrap_or(u64::MAX);
    for i in 0..n {
        let key = next_key(key, tag, i);
        let token = format!("{:032x}", fastrand::u128(..));
        let won = if fenced {
            let fence: i64 = acquire
                .key(key)
                .key("cost:fence")
                .arg(&token)
                .arg(ttl_ms)
                .invoke_async(conn)
                .await
                .unwrap_or_else(|err| panic!("fenced SET {key}: {err}"));
            fence > 0
        } else {
            let set: Option<String> = redis::cmd("SET")
                .arg(key)
                .arg(&token)
                .arg("NX")
                .arg("PX")
                .arg(ttl_ms)
                .query_async(conn)
                .await
                .unwrap_or_else(|err| panic!("SET {key}: {err}"));
            set.is_some()
        };
        assert!(won, "{key} was free");
        let deleted: i64 = release
            .key(key)
            .arg(&token)
            .invoke_async(conn)
            .await
            .unwrap_or_else(|err| panic!("release {key}: {err}"));
        assert_eq!(deleted, 1, "{key} released");
    }
}

/// Wakes the contended round when lockcore logs that an attempt found the key held ("lock contended; waiting") (the
/// waiter is queued by then: the same script call that found it held queued it).
struct HeldSignal(Arc<Notify>);

impl<S: Subscriber> Layer<S> for HeldSignal {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        let meta = event.metadata();
        if meta.target() == "lockcore" && meta.level() == &tracing::Level::DEBUG {
            let mut message = MessageOf(String::new());
            event.record(&mut message);
            if message.0.starts_with("lock contended") {
                self.0.notify_one();
            }
        }
    }
}

struct MessageOf(String);

impl tracing::field::Visit for MessageOf {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
        }
    }
}
