//! One service instance: a separate OS process with its own Redis and SQLite
//! connections, firing orders concurrently for one product.

use std::error::Error;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::task::JoinSet;

use crate::db::Db;
use crate::orders::{OrderError, OrderResult, Outcome, place_order, place_order_unlocked};
use crate::report::{Phase, WorkerReport};
use crate::topology::Target;

/// How many per-order errors a worker prints to stderr before going quiet.
const MAX_ERRORS_SHOWN: usize = 3;

/// Arguments of the hidden `worker` subcommand (set by the parent process).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct WorkerArgs {
    /// 1-based instance number, for the order rows and messages.
    #[arg(long)]
    pub(crate) instance: u32,
    #[arg(long, value_enum)]
    pub(crate) phase: Phase,
    /// The SQLite database file.
    #[arg(long)]
    pub(crate) db: PathBuf,
    #[command(flatten)]
    pub(crate) target: Target,
    #[arg(long)]
    pub(crate) product_id: i64,
    /// Orders this instance places in total.
    #[arg(long)]
    pub(crate) orders: u32,
    /// Orders in flight at once (each lane has its own SQLite connection).
    #[arg(long)]
    pub(crate) concurrency: u32,
    #[arg(long)]
    pub(crate) work_ms: u64,
}

/// What one order attempt came to, seen from the caller.
enum Attempt {
    Placed { wait: Duration },
    SoldOut { wait: Duration },
    Busy,
    Failed(OrderError),
}

impl Attempt {
    fn from_result(called: Instant, result: Result<OrderResult, OrderError>) -> Attempt {
        match result {
            Ok(OrderResult { outcome, started }) => {
                let wait = started.saturating_duration_since(called);
                match outcome {
                    Outcome::Placed { .. } => Attempt::Placed { wait },
                    Outcome::SoldOut => Attempt::SoldOut { wait },
                }
            }
            Err(OrderError::Lock(e)) if e.is_contended() => Attempt::Busy,
            Err(e) => Attempt::Failed(e),
        }
    }
}

pub(crate) async fn run(args: WorkerArgs) -> Result<(), Box<dyn Error>> {
    let who = format!("worker {} ({})", args.instance, args.phase);
    if args.concurrency == 0 {
        return Err(format!("{who}: --concurrency must be at least 1").into());
    }

    // Own connections, opened before the start signal so that connection
    // set-up is not part of the burst.
    let manager = args.target.connect().await.map_err(|e| {
        format!(
            "{who}: cannot connect to Redis at {}: {e}",
            args.target.describe()
        )
    })?;
    lockcore::set_default_manager(manager)?;
    crate::exporter::serve(&who)?;
    let lanes = args.concurrency.min(args.orders.max(1));
    let mut dbs = Vec::new();
    for _ in 0..lanes {
        let db = Db::open(args.db.clone()).await.map_err(|e| {
            format!(
                "{who}: cannot open SQLite database {}: {e}",
                args.db.display()
            )
        })?;
        dbs.push(db);
    }

    println!("ready");
    let mut line = String::new();
    BufReader::new(tokio::io::stdin())
        .read_line(&mut line)
        .await?;
    if line.trim() != "go" {
        return Err(format!("{who}: expected `go` from the parent, got {line:?}").into());
    }

    let next = Arc::new(AtomicU32::new(0));
    let mut set = JoinSet::new();
    for db in dbs {
        set.spawn(lane(db, Arc::clone(&next), args.clone()));
    }

    let mut report = WorkerReport {
        instance: args.instance,
        ..WorkerReport::default()
    };
    let mut errors_shown = 0;
    while let Some(joined) = set.join_next().await {
        for attempt in joined? {
            match attempt {
                Attempt::Placed { wait } => {
                    report.placed += 1;
                    report.waits_us.push(micros(wait));
                }
                Attempt::SoldOut { wait } => {
                    report.sold_out += 1;
                    report.waits_us.push(micros(wait));
                }
                Attempt::Busy => report.busy += 1,
                Attempt::Failed(e) => {
                    report.failed += 1;
                    if errors_shown < MAX_ERRORS_SHOWN {
                        errors_shown += 1;
                        eprintln!("{who}: order failed: {e}");
                    }
                }
            }
        }
    }
    println!("{}", report.to_line());
    Ok(())
}

/// One in-flight order at a time, on its own SQLite connection, until this
/// instance's order count is used up.
async fn lane(db: Db, next: Arc<AtomicU32>, args: WorkerArgs) -> Vec<Attempt> {
    let work = Duration::from_millis(args.work_ms);
    let mut attempts = Vec::new();
    // About 50 `progress` lines per worker, for the parent's progress bar.
    let step = (args.orders / 50).max(1);
    // Bounded: each turn claims one of `args.orders` tickets.
    loop {
        let ticket = next.fetch_add(1, Ordering::Relaxed);
        if ticket >= args.orders {
            break;
        }
        if ticket > 0 && ticket.is_multiple_of(step) {
            println!("progress {step}");
        }
        let called = Instant::now();
        let result = match args.phase {
            Phase::NoLock => place_order_unlocked(args.product_id, &db, args.instance, work).await,
            Phase::WithLock => place_order(args.product_id, &db, args.instance, work).await,
        };
        attempts.push(Attempt::from_result(called, result));
    }
    attempts
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}
