//! The service code: placing one order for a product.
//!
//! `sell_one` is the business logic, written the way the incident's service was:
//! read the stock, check it, do some work, decrement it. The two entry points
//! differ only in the attribute on top: the race is closed by
//! `#[distributed_lock]`, not by changing the logic.

use std::time::{Duration, Instant};

use lockcore::distributed_lock;

use crate::db::Db;

/// Why an order could not be processed (a sold-out product is not an error:
/// see [`Outcome::SoldOut`]).
#[derive(Debug, thiserror::Error)]
pub(crate) enum OrderError {
    /// Acquiring the product lock failed; `Contended` means it stayed busy for
    /// the whole wait budget (an HTTP 429 in a real service).
    #[error("lock: {0}")]
    Lock(#[from] lockcore::LockError),
    #[error("database: {0}")]
    Db(#[from] rusqlite::Error),
    #[error("database: a connection's mutex was poisoned by a panic")]
    DbPoisoned,
    #[error("database: blocking task failed: {0}")]
    Blocking(#[from] tokio::task::JoinError),
    #[error("product {product_id} does not exist")]
    UnknownProduct { product_id: i64 },
}

/// What happened to an order that was processed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The stock was decremented and an order row written.
    Placed { order_id: i64 },
    /// The stock read was zero (or below): rejected, nothing written.
    SoldOut,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct OrderResult {
    pub(crate) outcome: Outcome,
    /// When the order logic started running, i.e. after the lock was acquired
    /// (if any). The caller subtracts its own start time to get the lock wait.
    pub(crate) started: Instant,
}

/// The business logic. Not atomic on its own: between the read and the write
/// any other instance may sell the same unit.
pub(crate) async fn sell_one(
    product_id: i64,
    db: &Db,
    instance: u32,
    work: Duration,
) -> Result<OrderResult, OrderError> {
    let started = Instant::now();
    let stock = db.read_stock(product_id).await?;
    if stock <= 0 {
        return Ok(OrderResult {
            outcome: Outcome::SoldOut,
            started,
        });
    }
    // Price lookup, payment pre-authorisation, ...: a few ms in a real service.
    tokio::time::sleep(work).await;
    let order_id = db.take_one(product_id, instance).await?;
    Ok(OrderResult {
        outcome: Outcome::Placed { order_id },
        started,
    })
}

/// Phase 1: the service as it was before the incident.
pub(crate) async fn place_order_unlocked(
    product_id: i64,
    db: &Db,
    instance: u32,
    work: Duration,
) -> Result<OrderResult, OrderError> {
    sell_one(product_id, db, instance, work).await
}

/// Phase 2: the same logic, serialised per product across every instance.
///
/// TTL 10 s is far above the p99 of the critical section (a few ms) times
/// three; the wait budget is large enough that under this demo's burst no
/// order is turned away as busy.
#[distributed_lock(
    key = "order:lock:product:<product_id>",
    ttl_ms = 10_000,
    wait_ms = 30_000
)]
pub(crate) async fn place_order(
    product_id: i64,
    db: &Db,
    instance: u32,
    work: Duration,
) -> Result<OrderResult, OrderError> {
    sell_one(product_id, db, instance, work).await
}
