//! The shop's SQLite database: one `products` row holding the stock, one
//! `orders` row per sale.
//!
//! Every statement autocommits. There is deliberately no transaction around
//! "read stock, check it, decrement it": that read-check-write is the race the
//! distributed lock has to close, exactly as in the incident write-up.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};

use crate::orders::OrderError;

/// How long a writer waits for SQLite's write lock before `SQLITE_BUSY`.
const BUSY_TIMEOUT: Duration = Duration::from_secs(15);

/// Create (or reset) the database: WAL mode, one product with `stock` units,
/// no orders.
pub(crate) fn create(path: &Path, product_id: i64, stock: i64) -> rusqlite::Result<()> {
    let conn = open_connection(path)?;
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS products (
             id    INTEGER PRIMARY KEY,
             name  TEXT    NOT NULL,
             stock INTEGER NOT NULL
         );
         CREATE TABLE IF NOT EXISTS orders (
             id         INTEGER PRIMARY KEY AUTOINCREMENT,
             product_id INTEGER NOT NULL REFERENCES products(id),
             instance   INTEGER NOT NULL,
             created_at TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
         );",
    )?;
    reset(&conn, product_id, stock)
}

/// Put the stock back to `stock` and delete all orders (between phases).
pub(crate) fn reset_at(path: &Path, product_id: i64, stock: i64) -> rusqlite::Result<()> {
    reset(&open_connection(path)?, product_id, stock)
}

fn reset(conn: &Connection, product_id: i64, stock: i64) -> rusqlite::Result<()> {
    conn.execute("DELETE FROM orders", [])?;
    conn.execute(
        "INSERT INTO products (id, name, stock) VALUES (?1, 'limited edition mechanical keyboard', ?2)
         ON CONFLICT(id) DO UPDATE SET stock = excluded.stock",
        params![product_id, stock],
    )?;
    Ok(())
}

/// The ground truth after a phase: (orders placed, stock left).
pub(crate) fn final_state(path: &Path, product_id: i64) -> rusqlite::Result<(i64, i64)> {
    let conn = open_connection(path)?;
    let orders: i64 = conn.query_row(
        "SELECT COUNT(*) FROM orders WHERE product_id = ?1",
        params![product_id],
        |row| row.get(0),
    )?;
    let stock: i64 = conn.query_row(
        "SELECT stock FROM products WHERE id = ?1",
        params![product_id],
        |row| row.get(0),
    )?;
    Ok((orders, stock))
}

fn open_connection(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    // WAL: readers never block the writer and vice versa. `journal_mode`
    // answers with a row, hence query_row.
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(rusqlite::Error::InvalidParameterName(format!(
            "could not switch {} to WAL mode (got {mode})",
            path.display()
        )));
    }
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    Ok(conn)
}

/// One SQLite connection owned by one order lane of a worker.
///
/// rusqlite calls block, so they run on tokio's blocking pool and never stall
/// the runtime threads that drive Redis I/O (lock acquire, release).
#[derive(Clone)]
pub(crate) struct Db {
    conn: Arc<Mutex<Connection>>,
    path: PathBuf,
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db").field("path", &self.path).finish()
    }
}

impl Db {
    pub(crate) async fn open(path: PathBuf) -> Result<Db, OrderError> {
        let for_open = path.clone();
        let conn = tokio::task::spawn_blocking(move || open_connection(&for_open)).await??;
        Ok(Db {
            conn: Arc::new(Mutex::new(conn)),
            path,
        })
    }

    async fn run<T, F>(&self, f: F) -> Result<T, OrderError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        let conn = Arc::clone(&self.conn);
        tokio::task::spawn_blocking(move || {
            let conn = conn.lock().map_err(|_| OrderError::DbPoisoned)?;
            f(&conn).map_err(OrderError::from)
        })
        .await?
    }

    /// `SELECT stock` (autocommit).
    pub(crate) async fn read_stock(&self, product_id: i64) -> Result<i64, OrderError> {
        let stock = self
            .run(move |conn| {
                conn.query_row(
                    "SELECT stock FROM products WHERE id = ?1",
                    params![product_id],
                    |row| row.get::<_, i64>(0),
                )
                .optional()
            })
            .await?;
        stock.ok_or(OrderError::UnknownProduct { product_id })
    }

    /// Decrement the stock and record the order: two autocommit statements,
    /// like the service in the write-up. Returns the new order's id.
    pub(crate) async fn take_one(&self, product_id: i64, instance: u32) -> Result<i64, OrderError> {
        self.run(move |conn| {
            conn.execute(
                "UPDATE products SET stock = stock - 1 WHERE id = ?1",
                params![product_id],
            )?;
            conn.execute(
                "INSERT INTO orders (product_id, instance) VALUES (?1, ?2)",
                params![product_id, instance],
            )?;
            Ok(conn.last_insert_rowid())
        })
        .await
    }
}
