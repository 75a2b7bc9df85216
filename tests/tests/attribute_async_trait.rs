//! `#[distributed_lock]` on `#[async_trait]` methods and with `#[tracing::instrument]` above
//! and below it, against a real Redis.
//!
//! The span rule: attributes expand from the top, and each wraps what the ones above it made,
//! so the attribute written lower is the outer layer. `#[tracing::instrument]` below
//! `#[distributed_lock]` covers the acquire, the body and the release (a skipped or fallback
//! call is inside the span); above it covers the body only.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use lockcore::{LockError, LockManager, distributed_lock};
use lockcore_tests::*;
use redis::aio::MultiplexedConnection;
use tokio::sync::Barrier;

#[derive(Debug, thiserror::Error)]
enum AppError {
    #[error(transparent)]
    Lock(#[from] LockError),
}

#[async_trait]
trait Accounts {
    async fn deposit(&self, id: u64, con: MultiplexedConnection) -> Result<(), AppError>;
    async fn held_inside(&self, id: u64) -> Result<bool, AppError>;
}

struct Bank {
    locks: LockManager,
    locked: bool,
}

/// `GET` → yield (or wait for every other deposit to have read, when `between` is given) →
/// `SET +1` on `acct:<id>`: loses updates when two interleave.
async fn add_one(mut con: MultiplexedConnection, id: u64, between: Option<&Barrier>) {
    let key = format!("acct:{id}");
    let value: Option<i64> = query(&mut con, redis::cmd("GET").arg(&key)).await;
    match between {
        Some(barrier) => {
            barrier.wait().await;
        }
        None => tokio::task::yield_now().await,
    }
    let _: () = query(
        &mut con,
        redis::cmd("SET").arg(&key).arg(value.unwrap_or(0) + 1),
    )
    .await;
}

#[async_trait]
impl Accounts for Bank {
    #[distributed_lock(key = "acct:<id>", manager = self.locks, wait_ms = 20_000)]
    async fn deposit(&self, id: u64, con: MultiplexedConnection) -> Result<(), AppError> {
        assert!(self.locked);
        add_one(con, id, None).await;
        Ok(())
    }

    #[distributed_lock(key = "acct:<id>", manager = self.locks, wait_ms = 0, guard = g)]
    async fn held_inside(&self, id: u64) -> Result<bool, AppError> {
        let other = self
            .locks
            .try_acquire(&format!("acct:{id}"), &opts(1000, 0))
            .await?;
        Ok(other.is_none() && g.is_held())
    }
}

/// The twin: the same deposits without the lock; every deposit reads before any writes.
struct UnlockedBank {
    between: Barrier,
}

#[async_trait]
impl Accounts for UnlockedBank {
    async fn deposit(&self, id: u64, con: MultiplexedConnection) -> Result<(), AppError> {
        add_one(con, id, Some(&self.between)).await;
        Ok(())
    }

    async fn held_inside(&self, _id: u64) -> Result<bool, AppError> {
        Ok(false)
    }
}

async fn deposits(server: &RedisServer, bank: Arc<dyn Accounts + Send + Sync>) -> i64 {
    let mut tasks = Vec::new();
    for _ in 0..40 {
        let (bank, con) = (bank.clone(), server.connection().await);
        // `tokio::spawn` needs the method's future to be `Send`.
        tasks.push(tokio::spawn(async move { bank.deposit(7, con).await }));
    }
    for task in tasks {
        task.await.expect("task").expect("deposit");
    }
    query(
        &mut server.connection().await,
        redis::cmd("GET").arg("acct:7"),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_trait_method_locks_is_send_and_the_unlocked_twin_loses_updates() {
    let server = RedisServer::start();
    let locks = manager(&server).await;
    let bank = Arc::new(Bank {
        locks: locks.clone(),
        locked: true,
    });
    assert!(bank.held_inside(1).await.expect("body"));
    assert_eq!(deposits(&server, bank).await, 40);
    assert_eq!(locks.live_renewals(), 0);

    let twin = RedisServer::start();
    let twin_bank = Arc::new(UnlockedBank {
        between: Barrier::new(40),
    });
    let total = deposits(&twin, twin_bank).await;
    assert_eq!(total, 1, "without the lock 39 of the 40 updates are lost");
}

// ---- #[tracing::instrument] above and below ----------------------------------------------------

/// Records each event's message with the names of the spans entered around it (a span stack
/// per thread; the tests run on a current-thread runtime).
#[derive(Clone, Default)]
struct SpanEvents {
    names: Arc<Mutex<Vec<&'static str>>>,
    stack: Arc<Mutex<Vec<u64>>>,
    events: Arc<Mutex<Vec<String>>>,
}

struct Message(String);

impl tracing::field::Visit for Message {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl tracing::Subscriber for SpanEvents {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        let mut names = self.names.lock().unwrap();
        names.push(span.metadata().name());
        tracing::span::Id::from_u64(names.len() as u64)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut message = Message(String::new());
        event.record(&mut message);
        let names = self.names.lock().unwrap();
        let spans: Vec<&str> = self
            .stack
            .lock()
            .unwrap()
            .iter()
            .map(|id| names[*id as usize - 1])
            // lockcore's own spans (`lock.acquire`, `lock.body`, ...) are checked separately.
            .filter(|name| !name.starts_with("lock."))
            .collect();
        self.events
            .lock()
            .unwrap()
            .push(format!("{} in {spans:?}", message.0));
    }
    fn enter(&self, span: &tracing::span::Id) {
        self.stack.lock().unwrap().push(span.into_u64());
    }
    fn exit(&self, _: &tracing::span::Id) {
        self.stack.lock().unwrap().pop();
    }
}

impl SpanEvents {
    fn matching(&self, needle: &str) -> Vec<String> {
        let events = self.events.lock().unwrap();
        events
            .iter()
            .filter(|e| e.contains(needle))
            .cloned()
            .collect()
    }
}

#[tracing::instrument(skip(m))]
#[distributed_lock(key = "traced:<id>", manager = m, wait_ms = 0, on_contended = "skip")]
async fn instrument_above(m: &LockManager, id: u64) -> Result<(), AppError> {
    tracing::info!("body of instrument_above");
    assert!(
        m.try_acquire(&format!("traced:{id}"), &opts(1000, 0))
            .await?
            .is_none()
    );
    Ok(())
}

#[distributed_lock(key = "traced:<id>", manager = m, wait_ms = 0, on_contended = "skip")]
#[tracing::instrument(skip(m))]
async fn instrument_below(m: &LockManager, id: u64) -> Result<(), AppError> {
    tracing::info!("body of instrument_below");
    assert!(
        m.try_acquire(&format!("traced:{id}"), &opts(1000, 0))
            .await?
            .is_none()
    );
    Ok(())
}

#[tokio::test]
async fn tracing_instrument_above_and_below() {
    let (_server, m, _raw) = start_with_manager().await;
    let events = SpanEvents::default();
    let _capture = tracing::subscriber::set_default(events.clone());

    // Both orders lock, and the body runs in the span.
    instrument_above(&m, 1).await.expect("above");
    instrument_below(&m, 2).await.expect("below");
    assert_eq!(
        events.matching("body of instrument_above"),
        ["body of instrument_above in [\"instrument_above\"]"]
    );
    assert_eq!(
        events.matching("body of instrument_below"),
        ["body of instrument_below in [\"instrument_below\"]"]
    );
    assert!(
        events.names.lock().unwrap().contains(&"lock.body"),
        "lockcore's own body span is there too"
    );

    // Below: the span covers the acquire (a skip is inside it); above: only the body.
    let holder = must_acquire(&m, "traced:1", &opts(5000, 0)).await;
    instrument_above(&m, 1).await.expect("skipped");
    holder.release().await.expect("release");
    let holder = must_acquire(&m, "traced:2", &opts(5000, 0)).await;
    instrument_below(&m, 2).await.expect("skipped");
    holder.release().await.expect("release");
    let skips = events.matching("skipped the body");
    assert_eq!(skips.len(), 2, "{skips:?}");
    assert!(skips[0].ends_with("in []"), "{skips:?}");
    assert!(skips[1].ends_with("in [\"instrument_below\"]"), "{skips:?}");
}

#[async_trait]
trait Traced {
    async fn above(&self, id: u64) -> Result<bool, AppError>;
    async fn below(&self, id: u64) -> Result<bool, AppError>;
}

#[async_trait]
impl Traced for Bank {
    #[tracing::instrument(skip(self))]
    #[distributed_lock(key = "tt:<id>", manager = self.locks, wait_ms = 0)]
    async fn above(&self, id: u64) -> Result<bool, AppError> {
        tracing::info!("async-trait above");
        Ok(self
            .locks
            .try_acquire(&format!("tt:{id}"), &opts(1000, 0))
            .await?
            .is_none())
    }

    #[distributed_lock(key = "tt:<id>", manager = self.locks, wait_ms = 0)]
    #[tracing::instrument(skip(self))]
    async fn below(&self, id: u64) -> Result<bool, AppError> {
        tracing::info!("async-trait below");
        Ok(self
            .locks
            .try_acquire(&format!("tt:{id}"), &opts(1000, 0))
            .await?
            .is_none())
    }
}

#[tokio::test]
async fn async_trait_with_tracing_instrument_in_both_orders() {
    let (_server, locks, _raw) = start_with_manager().await;
    let events = SpanEvents::default();
    let _capture = tracing::subscriber::set_default(events.clone());
    let bank = Bank {
        locks,
        locked: true,
    };
    assert!(bank.above(1).await.expect("above"), "locked");
    assert!(bank.below(2).await.expect("below"), "locked");
    assert_eq!(
        events.matching("async-trait above"),
        ["async-trait above in [\"above\"]"]
    );
    assert_eq!(
        events.matching("async-trait below"),
        ["async-trait below in [\"below\"]"]
    );
}
