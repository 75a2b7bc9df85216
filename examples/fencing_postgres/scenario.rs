//! The paused-holder scenario against PostgreSQL, fenced and unfenced.
//!
//! The row `stock(id, qty, writer, fence)` is written only in a transaction that also appends
//! to `stock_log`. The fenced write is one conditional statement in that transaction:
//!
//! ```sql
//! UPDATE stock SET qty = $3, writer = $4, fence = $1 WHERE id = $2 AND fence <= $1
//! ```
//!
//! `$1` is the writer's fencing token ([`LockGuard::fencing_token`]). A holder whose lease ran
//! out while it stalled carries a smaller token than the holder after it, so its update matches
//! no row, and the transaction (with its log row) is rolled back: PostgreSQL itself refuses the
//! stale write, however late it arrives. Under READ COMMITTED a concurrent update of the row
//! waits for the other transaction and re-checks `fence <= $1` on the row it committed.
//!
//! [`LockGuard::fencing_token`]: lockcore::LockGuard::fencing_token

use std::time::{Duration, Instant};

use lockcore::{LockError, LockManager, LockOptions};
use tokio::sync::oneshot;
use tokio_postgres::{Client, NoTls};

/// The lock key, and the row of the resource it guards.
pub(crate) const KEY: &str = "fencing-pg:stock:42";
const ITEM: i32 = 42;
/// The stock before either holder sells.
pub(crate) const INITIAL_QTY: i32 = 10;
/// Holder A's lease: it stalls past it.
pub(crate) const A_TTL: Duration = Duration::from_millis(400);
/// What each holder sells: A one (its stale plan writes 9), B three (writes 7).
const A_SELLS: i32 = 1;
const B_SELLS: i32 = 3;

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Whether writes carry the fencing token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// `UPDATE .. WHERE id = $2 AND fence <= $1`.
    Fenced,
    /// `UPDATE .. WHERE id = $1`: the naive write.
    Unfenced,
}

impl Mode {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Mode::Fenced => "fenced",
            Mode::Unfenced => "unfenced",
        }
    }
}

/// What one write did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Write {
    /// Committed: the row and its log entry.
    Applied,
    /// Refused by `fence <= $1` (a newer token wrote first) and rolled back.
    Rejected { current_fence: i64 },
}

/// What a run of the scenario saw.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) mode: Mode,
    pub(crate) a_token: u64,
    pub(crate) b_token: u64,
    /// How long B waited for A's lease to run out.
    pub(crate) b_waited: Duration,
    /// A's late write, after B's.
    pub(crate) a_write: Write,
    /// A's release once it resumed: `Lost`, since its lease ran out.
    pub(crate) a_release: Result<(), LockError>,
    /// The row at the end: `(qty, writer, fence)`.
    pub(crate) final_row: (i32, String, i64),
    /// `stock_log` at the end, oldest first: `(writer, qty)`.
    pub(crate) log: Vec<(String, i32)>,
}

impl Outcome {
    /// B's sale survived (fenced) or A's stale write clobbered it (unfenced): what the scenario
    /// must show.
    pub(crate) fn as_expected(&self) -> bool {
        let b_kept = self.final_row.0 == INITIAL_QTY - B_SELLS && self.final_row.1 == "B";
        let a_clobbered = self.final_row.0 == INITIAL_QTY - A_SELLS && self.final_row.1 == "A";
        match self.mode {
            Mode::Fenced => b_kept && matches!(self.a_write, Write::Rejected { .. }),
            Mode::Unfenced => a_clobbered && self.a_write == Write::Applied,
        }
    }
}

/// Connects to PostgreSQL (`config`: a libpq connection string); the connection is driven by
/// a spawned task.
pub(crate) async fn connect(config: &str) -> Result<Client, BoxError> {
    let (client, connection) = tokio_postgres::connect(config, NoTls).await?;
    tokio::spawn(async move {
        if let Err(err) = connection.await {
            eprintln!("fencing_postgres: postgres connection: {err}");
        }
    });
    Ok(client)
}

/// Creates the tables (when missing) and resets the row and its log.
pub(crate) async fn reset(client: &Client) -> Result<(), BoxError> {
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS stock (
                 id int PRIMARY KEY, qty int NOT NULL, writer text NOT NULL,
                 fence bigint NOT NULL DEFAULT 0);
             CREATE TABLE IF NOT EXISTS stock_log (
                 seq bigserial PRIMARY KEY, item int NOT NULL, writer text NOT NULL,
                 qty int NOT NULL, fence bigint);
             TRUNCATE stock_log;",
        )
        .await?;
    client
        .execute(
            "INSERT INTO stock (id, qty, writer, fence) VALUES ($1, $2, 'init', 0)
             ON CONFLICT (id) DO UPDATE SET qty = $2, writer = 'init', fence = 0",
            &[&ITEM, &INITIAL_QTY],
        )
        .await?;
    Ok(())
}

/// Sets the row to `qty` as `writer` and logs it, in one transaction; fenced with `token`,
/// the update applies only while no larger token has written.
pub(crate) async fn write(
    client: &mut Client,
    mode: Mode,
    token: u64,
    qty: i32,
    writer: &str,
) -> Result<Write, BoxError> {
    let fence = i64::try_from(token)
        .map_err(|_| format!("fencing token {token} is above PostgreSQL's bigint"))?;
    let tx = client.transaction().await?;
    let updated = match mode {
        Mode::Fenced => {
            tx.execute(
                "UPDATE stock SET qty = $3, writer = $4, fence = $1 WHERE id = $2 AND fence <= $1",
                &[&fence, &ITEM, &qty, &writer],
            )
            .await?
        }
        Mode::Unfenced => {
            tx.execute(
                "UPDATE stock SET qty = $2, writer = $3 WHERE id = $1",
                &[&ITEM, &qty, &writer],
            )
            .await?
        }
    };
    if updated == 0 {
        let current_fence: i64 = tx
            .query_one("SELECT fence FROM stock WHERE id = $1", &[&ITEM])
            .await?
            .get(0);
        tx.rollback().await?;
        return Ok(Write::Rejected { current_fence });
    }
    tx.execute(
        "INSERT INTO stock_log (item, writer, qty, fence) VALUES ($1, $2, $3, $4)",
        &[&ITEM, &writer, &qty, &fence],
    )
    .await?;
    tx.commit().await?;
    Ok(Write::Applied)
}

async fn read_qty(client: &Client) -> Result<i32, BoxError> {
    Ok(client
        .query_one("SELECT qty FROM stock WHERE id = $1", &[&ITEM])
        .await?
        .get(0))
}

/// One run: A takes the lock (ttl [`A_TTL`], no watchdog), reads the stock and stalls before
/// its write (think of a GC pause); B's acquire returns once A's lease has run out, B sells
/// and writes with its larger token, releases, and only then A resumes and writes what it
/// planned before the stall. Each holder has its own PostgreSQL connection, as two service
/// instances would.
pub(crate) async fn run(
    locks: &LockManager,
    pg_config: &str,
    mode: Mode,
) -> Result<Outcome, BoxError> {
    let setup = connect(pg_config).await?;
    reset(&setup).await?;
    let mut a_db = connect(pg_config).await?;
    let mut b_db = connect(pg_config).await?;

    // Holder A: acquires, plans its write, stalls until told to resume.
    let a_opts = LockOptions::new(A_TTL).wait(Duration::ZERO).watchdog(false);
    let a_guard = locks.acquire(KEY, &a_opts).await?;
    let a_token = a_guard.fencing_token();
    let a_plan = read_qty(&a_db).await? - A_SELLS;
    let (resume, stalled) = oneshot::channel::<()>();
    let holder_a = tokio::spawn(async move {
        // The stall: nothing A does depends on time; it resumes when B is done.
        let _ = stalled.await;
        let write = write(&mut a_db, mode, a_token, a_plan, "A").await;
        let release = a_guard.release().await;
        (write, release)
    });

    // Holder B: its acquire waits on the lock until A's lease runs out.
    let started = Instant::now();
    let b_opts = LockOptions::new(Duration::from_secs(10)).wait(Duration::from_secs(10));
    let b_guard = locks.acquire(KEY, &b_opts).await?;
    let b_waited = started.elapsed();
    let b_token = b_guard.fencing_token();
    let b_qty = read_qty(&b_db).await? - B_SELLS;
    let b_write = write(&mut b_db, mode, b_token, b_qty, "B").await?;
    if b_write != Write::Applied {
        return Err(format!("the current holder's write was refused: {b_write:?}").into());
    }
    b_guard.release().await?;

    let _ = resume.send(());
    let (a_write, a_release) = holder_a.await?;
    let a_write = a_write?;
    let row = setup
        .query_one(
            "SELECT qty, writer, fence FROM stock WHERE id = $1",
            &[&ITEM],
        )
        .await?;
    let log = setup
        .query("SELECT writer, qty FROM stock_log ORDER BY seq", &[])
        .await?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    Ok(Outcome {
        mode,
        a_token,
        b_token,
        b_waited,
        a_write,
        a_release,
        final_row: (row.get(0), row.get(1), row.get(2)),
        log,
    })
}
