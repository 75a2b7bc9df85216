//! Idempotency keys against a real Redis: `LockManager::idempotent` and `#[lockcore::idempotent]`.
//! Sequential and concurrent duplicates run the body once (with the twin without idempotency
//! that places two orders), errors are not stored, keys are independent, a record never
//! blocks a lock on the same rendered key, and the edge cases (a record that no longer
//! deserializes, a value too large, another fingerprint, a lost lock).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use lockcore::{Idempotency, LockError, LockManager, distributed_lock, idempotent};
use lockcore_tests::*;
use tokio::time::Instant;

#[derive(Debug, thiserror::Error)]
enum AppError {
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error("payment declined")]
    Declined,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct Order {
    id: u64,
    product: u64,
}

/// Counts the orders placed; each gets a fresh id.
#[derive(Default)]
struct Shop {
    placed: AtomicU64,
}

impl Shop {
    async fn place(&self, product: u64) -> Result<Order, AppError> {
        tokio::task::yield_now().await;
        let id = self.placed.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(Order { id, product })
    }
}

#[idempotent(key = "order:req:<request_id>", ttl_ms = 60_000, manager = m, wait_ms = 5000)]
async fn place_order(
    m: &LockManager,
    shop: &Shop,
    request_id: &str,
    product: u64,
) -> Result<Order, AppError> {
    shop.place(product).await
}

/// The record key and lock key of an idempotency key under the default prefix.
fn idem_keys(key: &str) -> (String, String) {
    lockcore::keyspace::idempotency_keys(lockcore::DEFAULT_KEY_PREFIX, key)
}

/// The twin: the same request without an idempotency key.
async fn place_order_plain(shop: &Shop, product: u64) -> Result<Order, AppError> {
    shop.place(product).await
}

#[tokio::test]
async fn a_retried_request_returns_the_first_order_and_the_twin_places_two() {
    let (_server, m, _raw) = start_with_manager().await;
    let shop = Shop::default();
    let first = place_order(&m, &shop, "r1", 5).await.expect("first");
    let retry = place_order(&m, &shop, "r1", 5).await.expect("retry");
    assert_eq!(first, retry, "the retry returns the stored order");
    assert_eq!(shop.placed.load(Ordering::SeqCst), 1, "the body ran once");

    let twin = Shop::default();
    place_order_plain(&twin, 5).await.expect("first");
    place_order_plain(&twin, 5).await.expect("retry");
    assert_eq!(
        twin.placed.load(Ordering::SeqCst),
        2,
        "without idempotency: two orders"
    );

    // Another key is another request.
    let other = place_order(&m, &shop, "r2", 5).await.expect("other");
    assert_ne!(other, first);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_duplicates_run_the_body_once_and_return_equal_values() {
    let (_server, m, _raw) = start_with_manager().await;
    let shop = Arc::new(Shop::default());
    let tasks: Vec<_> = (0..10)
        .map(|_| {
            let (m, shop) = (m.clone(), shop.clone());
            tokio::spawn(async move { place_order(&m, &shop, "same", 1).await })
        })
        .collect();
    let mut orders = Vec::new();
    for task in tasks {
        orders.push(task.await.expect("task").expect("order"));
    }
    assert_eq!(shop.placed.load(Ordering::SeqCst), 1, "the body ran once");
    assert!(orders.iter().all(|o| *o == orders[0]), "{orders:?}");
}

#[tokio::test]
async fn errors_are_not_stored_and_records_do_not_block_locks() {
    let (_server, m, _raw) = start_with_manager().await;
    let idem = Idempotency::new(Duration::from_secs(60));
    let runs = AtomicUsize::new(0);
    let declined: Result<u64, AppError> = m
        .idempotent("pay:1", &idem, || async {
            runs.fetch_add(1, Ordering::SeqCst);
            Err(AppError::Declined)
        })
        .await;
    assert!(matches!(declined, Err(AppError::Declined)));
    let paid: u64 = m
        .idempotent("pay:1", &idem, || async {
            runs.fetch_add(1, Ordering::SeqCst);
            // The record's own lock is not the lock on the rendered key.
            let lock = m.try_acquire("pay:1", &opts(1000, 0)).await?;
            Ok::<_, AppError>(u64::from(lock.is_some()))
        })
        .await
        .expect("the retry runs the body again");
    assert_eq!((paid, runs.load(Ordering::SeqCst)), (1, 2));
    // A stored record does not block the same key either.
    let lock = m
        .try_acquire("pay:1", &opts(1000, 0))
        .await
        .expect("acquire");
    assert!(
        lock.is_some(),
        "a record never blocks a lock on the same key"
    );
    // Lock keys cannot enter the records' name space.
    let err = m
        .try_acquire("__idem__rec:pay:1", &opts(1000, 0))
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::InvalidKey { .. }));
}

#[tokio::test]
async fn a_changed_type_is_an_error_naming_the_key_and_never_a_rerun() {
    let (_server, m, _raw) = start_with_manager().await;
    let idem = Idempotency::new(Duration::from_secs(60));
    let _: String = m
        .idempotent("req:t", &idem, || async {
            Ok::<_, AppError>("text".to_owned())
        })
        .await
        .expect("stored");
    let runs = AtomicUsize::new(0);
    let err = m
        .idempotent("req:t", &idem, || async {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<u64, AppError>(1)
        })
        .await
        .unwrap_err();
    let AppError::Lock(LockError::BadIdempotencyRecord { key, reason }) = err else {
        panic!("expected BadIdempotencyRecord, got {err:?}");
    };
    assert_eq!(key, "req:t");
    assert!(reason.contains("deserialize"), "{reason}");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "never a silent re-run");
}

#[tokio::test]
async fn a_record_above_the_limit_is_an_error_and_nothing_is_stored() {
    let (_server, m, mut raw) = start_with_manager().await;
    let idem = Idempotency::new(Duration::from_secs(60));
    let big = "x".repeat(Idempotency::MAX_RECORD_BYTES + 1);
    let err = m
        .idempotent("req:big", &idem, || async {
            Ok::<_, AppError>(big.clone())
        })
        .await
        .unwrap_err();
    assert!(
        matches!(err, AppError::Lock(LockError::BadIdempotencyRecord { .. })),
        "{err:?}"
    );
    let (record_key, lock_key) = idem_keys("req:big");
    assert!(!exists(&mut raw, &record_key).await);
    assert!(!exists(&mut raw, &lock_key).await, "lock released");
}

#[tokio::test]
async fn another_fingerprint_under_the_same_key_is_a_distinct_error() {
    let (_server, m, _raw) = start_with_manager().await;
    let a = Idempotency::new(Duration::from_secs(60)).fingerprint("body-a");
    let b = Idempotency::new(Duration::from_secs(60)).fingerprint("body-b");
    let _: u64 = m
        .idempotent("req:f", &a, || async { Ok::<_, AppError>(1) })
        .await
        .expect("a");
    let again: u64 = m
        .idempotent("req:f", &a, || async { Ok::<_, AppError>(2) })
        .await
        .expect("a");
    assert_eq!(again, 1);
    let err = m
        .idempotent("req:f", &b, || async { Ok::<u64, AppError>(3) })
        .await
        .unwrap_err();
    assert!(
        matches!(err, AppError::Lock(LockError::IdempotencyMismatch { ref key }) if key == "req:f"),
        "{err:?}"
    );
}

/// A holder that died mid-body (its lock left to expire, no record): the next call waits for
/// the lock's TTL, then runs the body; nothing half-written is ever returned.
#[tokio::test]
async fn a_holder_that_died_mid_body_lets_the_retry_run_after_the_ttl() {
    let (_server, m, mut raw) = start_with_manager().await;
    set_px(&mut raw, &idem_keys("req:dead").1, "dead-holder-token", 400).await;
    let idem =
        Idempotency::new(Duration::from_secs(60)).lock_options(opts(5000, 3000).watchdog(true));
    let started = Instant::now();
    let value: u64 = m
        .idempotent("req:dead", &idem, || async { Ok::<_, AppError>(42) })
        .await
        .expect("runs after the dead holder's TTL");
    assert_eq!(value, 42);
    assert!(
        started.elapsed() >= Duration::from_millis(350),
        "{:?}",
        started.elapsed()
    );
}

// ---- composition with #[distributed_lock] ------------------------------------------------------

#[distributed_lock(key = "stock:<product>", manager = m, wait_ms = 5000, guard = stock_lock)]
#[idempotent(key = "order:req:<request_id>", ttl_ms = 60_000, manager = m)]
async fn place_locked(
    m: &LockManager,
    shop: &Shop,
    request_id: &str,
    product: u64,
) -> Result<Order, AppError> {
    assert!(stock_lock.is_held());
    shop.place(product).await
}

#[tokio::test]
async fn composes_with_distributed_lock() {
    let (_server, m, _raw) = start_with_manager().await;
    let shop = Shop::default();
    let first = place_locked(&m, &shop, "c1", 9).await.expect("first");
    assert_eq!(
        place_locked(&m, &shop, "c1", 9).await.expect("retry"),
        first
    );
    assert_eq!(shop.placed.load(Ordering::SeqCst), 1);
}
