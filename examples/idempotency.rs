//! A client that times out and retries the same request: two orders without an idempotency
//! key, one with it (and the same order id returned both times).
//!
//! ```sh
//! cargo run --example idempotency            # starts a private redis-server
//! REDIS_URL=redis://127.0.0.1:6380/ cargo run --example idempotency
//! ```
//!
//! The service inserts an order row into SQLite, then is slow to answer (300 ms). The client
//! gives up after 100 ms and sends the same request (same request id) again, while the first
//! is still running on the server. Without idempotency both requests insert a row. With
//! `#[lockcore::idempotent(key = "order:req:<request_id>")]` the retry waits for the first call
//! and returns its stored order id. The program prints one summary line per phase and exits
//! non-zero if the idempotent phase placed more than one order.

use std::error::Error;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use lockcore::{LockError, LockManager, idempotent};
use rusqlite::{Connection, params};

type BoxError = Box<dyn Error + Send + Sync>;

/// How long the service takes to answer after inserting the order.
const SLOW_ANSWER: Duration = Duration::from_millis(300);
/// How long the client waits for an answer before it retries.
const CLIENT_TIMEOUT: Duration = Duration::from_millis(100);

#[derive(Debug, thiserror::Error)]
enum ShopError {
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error("database: {0}")]
    Db(String),
}

/// The service: inserts an order and answers its id.
struct Shop {
    locks: LockManager,
    db: PathBuf,
}

impl Shop {
    async fn place_order_plain(&self, request_id: String) -> Result<i64, ShopError> {
        let id = insert_order(&self.db, &request_id)?;
        tokio::time::sleep(SLOW_ANSWER).await;
        Ok(id)
    }

    #[idempotent(key = "order:req:<request_id>", ttl_ms = 86_400_000, manager = self.locks, wait_ms = 5000)]
    async fn place_order(&self, request_id: String) -> Result<i64, ShopError> {
        self.place_order_plain(request_id).await
    }
}

fn insert_order(db: &Path, request_id: &str) -> Result<i64, ShopError> {
    let conn = Connection::open(db).map_err(|e| ShopError::Db(e.to_string()))?;
    conn.execute(
        "INSERT INTO orders (request_id) VALUES (?1)",
        params![request_id],
    )
    .map_err(|e| ShopError::Db(e.to_string()))?;
    Ok(conn.last_insert_rowid())
}

fn count_orders(db: &Path) -> Result<i64, BoxError> {
    let conn = Connection::open(db)?;
    Ok(conn.query_row("SELECT COUNT(*) FROM orders", [], |row| row.get(0))?)
}

/// The client: one request, a timeout, then a retry with the same request id. Each request is
/// handled on its own server task, which keeps running when the client stops waiting.
async fn client(shop: Arc<Shop>, idempotent: bool) -> Result<Vec<i64>, BoxError> {
    let request_id = "req-7f3a".to_owned();
    let send = |shop: Arc<Shop>, request_id: String| {
        tokio::spawn(async move {
            if idempotent {
                shop.place_order(request_id).await
            } else {
                shop.place_order_plain(request_id).await
            }
        })
    };
    let mut first = send(shop.clone(), request_id.clone());
    let mut answers = Vec::new();
    if let Ok(answer) = tokio::time::timeout(CLIENT_TIMEOUT, &mut first).await {
        answers.push(answer??);
    }
    // No answer in time: the client retries with the same request id.
    let retry = send(shop, request_id).await??;
    answers.push(retry);
    // The first request's answer, which the client no longer waits for.
    answers.insert(0, first.await??);
    Ok(answers)
}

async fn phase(locks: &LockManager, dir: &Path, idempotent: bool) -> Result<i64, BoxError> {
    let name = if idempotent {
        "with-idempotency"
    } else {
        "no-idempotency"
    };
    let db = dir.join(format!("{name}.sqlite"));
    Connection::open(&db)?.execute_batch(
        "CREATE TABLE orders (id INTEGER PRIMARY KEY AUTOINCREMENT, request_id TEXT NOT NULL);",
    )?;
    let shop = Arc::new(Shop {
        locks: locks.clone(),
        db: db.clone(),
    });
    let answers = client(shop, idempotent).await?;
    let orders = count_orders(&db)?;
    println!("{name}: orders={orders} answers={answers:?}");
    Ok(orders)
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("idempotency: the retried request placed a second order");
            ExitCode::FAILURE
        }
        Err(error) => {
            eprintln!("idempotency demo failed: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<bool, BoxError> {
    let (url, _server) = match std::env::var("REDIS_URL") {
        Ok(url) => (url, None),
        Err(_) => {
            let server = lockcore_tests::RedisServer::start();
            (server.url(), Some(server))
        }
    };
    let locks = LockManager::builder()
        .url(url)
        .key_prefix("idempotency-demo:")
        .build()
        .await?;
    let dir = tempfile::tempdir()?;
    phase(&locks, dir.path(), false).await?;
    let orders = phase(&locks, dir.path(), true).await?;
    Ok(orders == 1)
}
