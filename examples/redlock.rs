//! The order service on Redlock: five independent Redis masters, two of which die midway.
//!
//! ```text
//! cargo run --example redlock
//! cargo run --example redlock -- --stock 40 --orders 200 --lanes 16
//! ```
//!
//! It reuses the order service's logic (`order_service/orders.rs` and `order_service/db.rs`):
//! `sell_one` reads the stock row, checks it, works a few ms, then decrements it. `--lanes`
//! orders run at once, each on its own SQLite connection, until `--orders` were attempted.
//!
//! 1. `no-lock`: `place_order_unlocked`. The lanes read the same stock before any of them
//!    writes: they oversell.
//! 2. `redlock`: `place_order`, the same logic under `#[distributed_lock]`, with the default
//!    manager set to a Redlock manager over five private `redis-server` processes (quorum 3).
//!    Once half the stock is sold, two nodes are killed (`SIGKILL`). The three left are still a
//!    quorum of the configured five, so orders go on, and exactly `--stock` orders are placed.
//!
//! Only `redis-server` on `PATH` is needed. The exit status is non-zero when the Redlock phase
//! oversells or its orders do not add up.

#[path = "order_service/db.rs"]
mod db;
#[path = "order_service/orders.rs"]
mod orders;

use std::error::Error;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use lockcore::LockManager;
use lockcore_tests::RedisServer;
use tokio::sync::Notify;
use tokio::task::JoinSet;

use crate::db::Db;
use crate::orders::{OrderError, OrderResult, Outcome, place_order, place_order_unlocked};

type BoxError = Box<dyn Error + Send + Sync>;

const PRODUCT_ID: i64 = 1;
const NODES: usize = 5;
/// How many nodes die midway; 5 − 2 = 3 is still a quorum.
const KILLED: usize = 2;
/// Per-node bound in the Redlock fan-out. Loopback answers in well under 1 ms; a killed node
/// costs this much on each release (which goes to every node).
const NODE_TIMEOUT: Duration = Duration::from_millis(25);

#[derive(Debug, Parser)]
#[command(
    about = "Overselling a stock row, then the same orders under Redlock with 2 of 5 nodes killed midway"
)]
struct Args {
    /// Units in stock at the start of each phase.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(i64).range(2..=10_000))]
    stock: i64,
    /// Orders attempted in each phase.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    orders: u32,
    /// Orders in flight at once.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=64))]
    lanes: u32,
    /// Simulated work between reading and writing the stock, in ms.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(0..=1_000))]
    work_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    NoLock,
    Redlock,
}

/// What one phase came to.
#[derive(Debug, Default)]
struct Tally {
    placed: u64,
    sold_out: u64,
    failed: u64,
    /// The longest wait for the lock (call to body start).
    max_wait: Duration,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("redlock: cannot start the tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("redlock: error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<bool, BoxError> {
    // Blocking (each start polls PING): off the runtime threads.
    let mut servers = tokio::task::spawn_blocking(|| {
        (0..NODES).map(|_| RedisServer::start()).collect::<Vec<_>>()
    })
    .await?;
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let dir = tempfile::Builder::new().prefix("redlock-demo-").tempdir()?;
    let db_path = dir.path().join("shop.sqlite3");
    db::create(&db_path, PRODUCT_ID, args.stock)?;
    println!(
        "redlock: {NODES} redis-server nodes ({}), quorum {}; product {PRODUCT_ID} with stock {}; \
         {} orders, {} at a time, {} ms work each",
        urls.join(" "),
        NODES / 2 + 1,
        args.stock,
        args.orders,
        args.lanes,
        args.work_ms,
    );

    let unlocked = run_phase(Phase::NoLock, &args, &db_path, None).await?;
    let unlocked_ok = report(Phase::NoLock, &args, &db_path, &unlocked)?;
    if unlocked_ok {
        println!("  (no oversell this time without a lock: raise --lanes or --work-ms)");
    }

    db::reset_at(&db_path, PRODUCT_ID, args.stock)?;
    let manager = LockManager::builder()
        .nodes(&urls)
        .node_timeout(NODE_TIMEOUT)
        .build()
        .await?;
    lockcore::set_default_manager(manager)?;
    // Kill two nodes once half the stock is sold: the lanes signal, this task kills.
    let half_sold = Arc::new(Notify::new());
    let kill = {
        let half_sold = Arc::clone(&half_sold);
        let doomed: Vec<RedisServer> = servers.split_off(NODES - KILLED);
        tokio::spawn(async move {
            half_sold.notified().await;
            tokio::task::spawn_blocking(move || {
                let mut doomed = doomed;
                for server in &mut doomed {
                    server.stop();
                }
                println!(
                    "  half the stock sold: killed {} of {NODES} nodes: {}",
                    doomed.len(),
                    doomed
                        .iter()
                        .map(RedisServer::url)
                        .collect::<Vec<_>>()
                        .join(" ")
                );
                doomed
            })
            .await
        })
    };
    let locked = run_phase(Phase::Redlock, &args, &db_path, Some(half_sold)).await?;
    if locked.placed < (args.stock / 2).unsigned_abs() {
        kill.abort();
        return Err("the phase sold less than half the stock: no node was killed".into());
    }
    kill.await??;
    report(Phase::Redlock, &args, &db_path, &locked)
}

/// Runs `args.orders` orders over `args.lanes` lanes. In the Redlock phase, `half_sold` is
/// notified when the order that sells half the stock is placed.
async fn run_phase(
    phase: Phase,
    args: &Args,
    db_path: &Path,
    half_sold: Option<Arc<Notify>>,
) -> Result<Tally, BoxError> {
    let tickets = Arc::new(AtomicU32::new(0));
    let placed = Arc::new(AtomicU64::new(0));
    let mut lanes = JoinSet::new();
    for lane in 1..=args.lanes {
        let db = Db::open(PathBuf::from(db_path)).await?;
        let (tickets, placed, half_sold) = (tickets.clone(), placed.clone(), half_sold.clone());
        let (orders, work, half) = (
            args.orders,
            Duration::from_millis(args.work_ms),
            args.stock / 2,
        );
        lanes.spawn(async move {
            let mut tally = Tally::default();
            // Bounded: each turn claims one of `orders` tickets.
            while tickets.fetch_add(1, Ordering::SeqCst) < orders {
                let called = Instant::now();
                let result = match phase {
                    Phase::NoLock => place_order_unlocked(PRODUCT_ID, &db, lane, work).await,
                    Phase::Redlock => place_order(PRODUCT_ID, &db, lane, work).await,
                };
                let sold = count(&mut tally, called, result);
                if sold
                    && placed.fetch_add(1, Ordering::SeqCst) + 1 == half.unsigned_abs()
                    && let Some(notify) = &half_sold
                {
                    notify.notify_one();
                }
            }
            tally
        });
    }
    let mut total = Tally::default();
    while let Some(lane) = lanes.join_next().await {
        let lane = lane?;
        total.placed += lane.placed;
        total.sold_out += lane.sold_out;
        total.failed += lane.failed;
        total.max_wait = total.max_wait.max(lane.max_wait);
    }
    Ok(total)
}

/// Adds one order's result to `tally`; `true` when it was placed.
fn count(tally: &mut Tally, called: Instant, result: Result<OrderResult, OrderError>) -> bool {
    match result {
        Ok(OrderResult { outcome, started }) => {
            tally.max_wait = tally
                .max_wait
                .max(started.saturating_duration_since(called));
            match outcome {
                Outcome::Placed { .. } => {
                    tally.placed += 1;
                    return true;
                }
                Outcome::SoldOut => tally.sold_out += 1,
            }
        }
        Err(e) => {
            if tally.failed == 0 {
                eprintln!("  order failed: {e}");
            }
            tally.failed += 1;
        }
    }
    false
}

/// Prints one phase; `Ok(true)` when it did not oversell and the rows add up.
fn report(phase: Phase, args: &Args, db_path: &Path, tally: &Tally) -> Result<bool, BoxError> {
    let (orders, stock) = db::final_state(db_path, PRODUCT_ID)?;
    let oversold = orders - args.stock;
    let consistent = orders == args.stock - stock && u64::try_from(orders)? == tally.placed;
    println!(
        "phase {}: {} placed, {} sold out, {} failed; {orders} order rows, stock left {stock}, \
         oversold {}{}",
        match phase {
            Phase::NoLock => "no-lock",
            Phase::Redlock => "redlock",
        },
        tally.placed,
        tally.sold_out,
        tally.failed,
        oversold.max(0),
        match phase {
            Phase::NoLock => String::new(),
            Phase::Redlock => format!("; longest lock wait {:?}", tally.max_wait),
        },
    );
    if !consistent {
        eprintln!("  error: the order rows do not match the stock or the placed count");
    }
    Ok(oversold <= 0 && consistent)
}
