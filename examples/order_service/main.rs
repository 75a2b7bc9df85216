//! Several instances of an order service sell the same stock row.
//!
//! ```text
//! cargo run --release --example order_service
//! cargo run --release --example order_service -- --stock 20 --instances 4
//! REDIS_URL=redis://127.0.0.1:6380/ cargo run --release --example order_service
//! cargo run --release --example order_service -- --topology cluster
//! ```
//!
//! The parent process creates an SQLite database holding one product with
//! `--stock` units, then runs two phases. In each it starts `--instances`
//! worker processes (this same binary, hidden `worker` subcommand), and each
//! worker fires `--orders-per-instance` orders, `--concurrency` at a time:
//!
//! 1. `no-lock`: `place_order_unlocked`, a plain `async fn`. Every order reads
//!    the stock, checks it, works for `--work-ms`, then decrements it. The
//!    instances read the same stock before anyone writes: they oversell.
//! 2. `with-lock`: `place_order`, the same `sell_one` logic under
//!    `#[distributed_lock(key = "order:lock:product:<product_id>", ..)]`.
//!    Exactly `--stock` orders succeed; the rest are rejected as sold out.
//!
//! Without `REDIS_URL` the demo starts its own servers on free ports on 127.0.0.1 (only
//! `redis-server` on `PATH` is needed): one node by default, or `--topology sentinel`,
//! `cluster` or `redlock`; they are stopped at the end.
//!
//! While it runs, every worker serves its lock metrics in the Prometheus text
//! format on a free loopback port (its URL is printed on stderr), a progress bar
//! per phase is drawn on stderr when it is a terminal, and `--plot FILE.png`
//! draws the lock-wait distribution of both phases.
//! The exit status is non-zero when the locked phase oversells.

mod db;
mod demo;
mod exporter;
mod orders;
mod plot;
mod report;
mod topology;
mod worker;

use std::error::Error;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "order_service",
    about = "Overselling a stock row from several service instances, without and with #[distributed_lock]",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    demo: demo::DemoArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// One service instance (started by the demo itself).
    #[command(hide = true)]
    Worker(worker::WorkerArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result: Result<bool, Box<dyn Error>> = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(Box::from)
        .and_then(|runtime| {
            runtime.block_on(async {
                match cli.command {
                    Some(Command::Worker(args)) => worker::run(args).await.map(|()| true),
                    None => demo::run(cli.demo).await,
                }
            })
        });
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("order_service: error: {e}");
            ExitCode::FAILURE
        }
    }
}
