//! An axum service that sells stock under `#[distributed_lock]`: 429 when the lock is
//! contended, 409 when the product is out of stock, and a graceful shutdown that lets the
//! requests in flight finish (and release their locks) before the lock manager closes.
//!
//! ```sh
//! cargo run --example axum_shop       # starts a private redis-server, listens on 127.0.0.1:3000
//! curl -X POST http://127.0.0.1:3000/products/1/buy
//! curl http://127.0.0.1:3000/products/1
//! ```
//!
//! `REDIS_URL` picks an existing Redis instead; `--wait-ms 0` makes every contended sale a 429
//! at once. Ctrl-C (or SIGTERM) shuts it down gracefully. See `shop.rs` for the routes.

mod shop;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use lockcore::{LockManager, LockOptions};
use shop::{BoxError, Shop};

#[derive(Parser, Debug)]
#[command(about = "An axum shop whose sales hold a Redis lock per product")]
struct Cli {
    /// Redis to use (locks and stock); without it a private redis-server is started.
    #[arg(long, env = "REDIS_URL")]
    redis_url: Option<String>,
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1:3000")]
    listen: String,
    /// The stock of product 1 at start.
    #[arg(long, default_value_t = 10)]
    stock: i64,
    /// How long a sale's payment call takes, in ms.
    #[arg(long, default_value_t = 50)]
    work_ms: u64,
    /// How long a sale waits for a contended product lock before answering 429, in ms.
    #[arg(long, default_value_t = 2_000)]
    wait_ms: u64,
}

#[tokio::main]
async fn main() -> ExitCode {
    match run(Cli::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("axum_shop: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<(), BoxError> {
    let (url, _server) = match cli.redis_url {
        Some(url) => (url, None),
        None => {
            let server = lockcore_tests::RedisServer::start();
            (server.url(), Some(server))
        }
    };
    let locks = LockManager::builder()
        .url(&url)
        .default_options(
            LockOptions::new(Duration::from_secs(10)).wait(Duration::from_millis(cli.wait_ms)),
        )
        .build()
        .await?;
    let shop = Arc::new(Shop::new(locks, &url, Duration::from_millis(cli.work_ms)).await?);
    shop.restock(1, cli.stock).await?;
    let listener = tokio::net::TcpListener::bind(&cli.listen).await?;
    println!(
        "axum_shop: listening on http://{}, redis {}, product 1 has {} in stock",
        listener.local_addr()?,
        lockcore::redact_url(&url),
        cli.stock
    );
    shop::serve(listener, shop, shutdown_signal()).await?;
    println!("axum_shop: shut down");
    Ok(())
}

/// Ctrl-C or SIGTERM, whichever comes first.
async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                term.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
