//! The shop service: its state, its handlers and how it serves and shuts down.
//!
//! | route | what it does |
//! |---|---|
//! | `POST /products/{id}/buy` | sells one under `#[distributed_lock]`: 200, 409 when out of stock, 429 when the lock is contended past the wait budget |
//! | `POST /products/{id}/buy-unlocked` | the same sale without the lock: the twin that oversells |
//! | `GET /products/{id}` | the stock left and the orders sold |
//!
//! The stock lives in Redis (`shop:stock:<id>`, orders in `shop:orders:<id>`), shared by every
//! instance of the service, like a database row would be. A sale reads the stock, calls the
//! payment provider (a pause of `work`), then writes the stock back: without the lock, two
//! sales that overlap both sell the last item.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use lockcore::{LockError, LockManager, distributed_lock};
use redis::AsyncCommands;
use serde::Serialize;
use tokio::net::TcpListener;

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// One service instance: its lock manager, its connection to the shared store, and how long
/// the payment call takes.
pub(crate) struct Shop {
    locks: LockManager,
    store: redis::aio::ConnectionManager,
    work: Duration,
}

/// A sale.
#[derive(Debug, Serialize)]
pub(crate) struct Order {
    pub(crate) product_id: u64,
    /// This product's sale number, from 1.
    pub(crate) order_no: u64,
    pub(crate) stock_left: i64,
}

/// A product's stock and sales.
#[derive(Debug, Serialize)]
pub(crate) struct Product {
    pub(crate) product_id: u64,
    pub(crate) stock: i64,
    pub(crate) sold: u64,
}

/// Why a request failed, and the status it answers with.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ShopError {
    /// The lock: `Contended` (429, try again), anything else (503).
    #[error(transparent)]
    Lock(#[from] LockError),
    /// A business conflict (409).
    #[error("product {product_id} is out of stock")]
    OutOfStock { product_id: u64 },
    /// The store failed (503).
    #[error("the store failed: {0}")]
    Store(#[from] redis::RedisError),
}

impl IntoResponse for ShopError {
    fn into_response(self) -> Response {
        let status = match &self {
            ShopError::Lock(e) if e.is_contended() => StatusCode::TOO_MANY_REQUESTS,
            ShopError::OutOfStock { .. } => StatusCode::CONFLICT,
            ShopError::Lock(_) | ShopError::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
        };
        let body = Json(serde_json::json!({ "error": self.to_string() }));
        let mut response = (status, body).into_response();
        if status == StatusCode::TOO_MANY_REQUESTS {
            // Another request holds this product's lock: it is done within the TTL at most.
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

impl Shop {
    /// A shop on the store at `store_url`, locking through `locks` (whose default options give
    /// the wait budget of every sale), with a payment call of `work`.
    pub(crate) async fn new(
        locks: LockManager,
        store_url: &str,
        work: Duration,
    ) -> Result<Shop, BoxError> {
        let store = redis::Client::open(store_url)?
            .get_connection_manager()
            .await?;
        Ok(Shop { locks, store, work })
    }

    /// Sets the stock of `product_id` to `stock` and forgets its orders.
    pub(crate) async fn restock(&self, product_id: u64, stock: i64) -> Result<(), ShopError> {
        let mut store = self.store.clone();
        let _: () = redis::pipe()
            .set(stock_key(product_id), stock)
            .del(orders_key(product_id))
            .query_async(&mut store)
            .await?;
        Ok(())
    }

    /// The stock and sales of `product_id`.
    pub(crate) async fn product(&self, product_id: u64) -> Result<Product, ShopError> {
        let mut store = self.store.clone();
        let (stock, sold): (Option<i64>, u64) = redis::pipe()
            .get(stock_key(product_id))
            .llen(orders_key(product_id))
            .query_async(&mut store)
            .await?;
        Ok(Product {
            product_id,
            stock: stock.unwrap_or(0),
            sold,
        })
    }

    /// Sells one item of `product_id` while holding its lock: one sale at a time per product,
    /// across every instance. The wait budget is the manager's default.
    #[distributed_lock(key = "shop:product:<product_id>", ttl_ms = 10_000, manager = self.locks)]
    pub(crate) async fn buy(&self, product_id: u64) -> Result<Order, ShopError> {
        self.sell_one(product_id).await
    }

    /// The same sale without the lock.
    pub(crate) async fn buy_unlocked(&self, product_id: u64) -> Result<Order, ShopError> {
        self.sell_one(product_id).await
    }

    /// Read the stock, take the payment, write the stock back: a read-modify-write that only
    /// the lock makes safe.
    async fn sell_one(&self, product_id: u64) -> Result<Order, ShopError> {
        let mut store = self.store.clone();
        let stock: Option<i64> = store.get(stock_key(product_id)).await?;
        let stock = stock.unwrap_or(0);
        if stock <= 0 {
            return Err(ShopError::OutOfStock { product_id });
        }
        // The payment provider's round trip.
        tokio::time::sleep(self.work).await;
        let (order_no,): (u64,) = redis::pipe()
            .set(stock_key(product_id), stock - 1)
            .ignore()
            .rpush(orders_key(product_id), stock)
            .query_async(&mut store)
            .await?;
        Ok(Order {
            product_id,
            order_no,
            stock_left: stock - 1,
        })
    }
}

fn stock_key(product_id: u64) -> String {
    format!("shop:stock:{product_id}")
}

fn orders_key(product_id: u64) -> String {
    format!("shop:orders:{product_id}")
}

async fn buy(
    State(shop): State<Arc<Shop>>,
    Path(product_id): Path<u64>,
) -> Result<Json<Order>, ShopError> {
    shop.buy(product_id).await.map(Json)
}

async fn buy_unlocked(
    State(shop): State<Arc<Shop>>,
    Path(product_id): Path<u64>,
) -> Result<Json<Order>, ShopError> {
    shop.buy_unlocked(product_id).await.map(Json)
}

async fn product(
    State(shop): State<Arc<Shop>>,
    Path(product_id): Path<u64>,
) -> Result<Json<Product>, ShopError> {
    shop.product(product_id).await.map(Json)
}

/// The routes of the table above.
pub(crate) fn router(shop: Arc<Shop>) -> Router {
    Router::new()
        .route("/products/{id}", get(product))
        .route("/products/{id}/buy", post(buy))
        .route("/products/{id}/buy-unlocked", post(buy_unlocked))
        .with_state(shop)
}

/// Serves `shop` on `listener` until `shutdown` completes, then lets the requests in flight
/// finish (axum's graceful shutdown: each releases its lock on the way out), then closes the
/// lock manager.
pub(crate) async fn serve(
    listener: TcpListener,
    shop: Arc<Shop>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), BoxError> {
    let locks = shop.locks.clone();
    axum::serve(listener, router(shop))
        .with_graceful_shutdown(shutdown)
        .await?;
    // Releases any guard still alive (a handler cancelled mid-flight) and stops the watchdog
    // and the hand-off listener; acquires after this fail with `LockError::Closed`.
    locks.close().await?;
    Ok(())
}
