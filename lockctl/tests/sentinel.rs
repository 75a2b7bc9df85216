//! `lockctl --sentinel URL --master NAME` against a real primary and one real Sentinel
//! (`redis-server FILE --sentinel`) started here.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{fails_with, json};
use lockcore::{LockManager, LockOptions};
use lockcore_tests::RedisServer;

/// A Sentinel process on a free loopback port, killed on drop.
struct Sentinel {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let port = listener.local_addr().expect("local addr").port();
    assert_ne!(port, 6379, "never the developer's own Redis port");
    port
}

async fn start_sentinel(master: &RedisServer) -> Sentinel {
    let dir = tempfile::tempdir().expect("temp dir");
    let port = free_port();
    let conf = dir.path().join("sentinel.conf");
    std::fs::write(
        &conf,
        format!(
            "port {port}\nbind 127.0.0.1\ndir {}\nsentinel monitor orders 127.0.0.1 {} 1\n",
            dir.path().display(),
            master.port()
        ),
    )
    .expect("write sentinel.conf");
    let child = Command::new("redis-server")
        .arg(&conf)
        .arg("--sentinel")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn redis-server --sentinel");
    let sentinel = Sentinel {
        child,
        port,
        _dir: dir,
    };
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).expect("url");
    for _ in 0..500 {
        if let Ok(mut con) = client.get_multiplexed_async_connection().await {
            let master: redis::RedisResult<Vec<String>> = redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg("orders")
                .query_async(&mut con)
                .await;
            if master.is_ok_and(|addr| addr.len() == 2) {
                return sentinel;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("sentinel on port {port} never answered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_the_primary_found_through_sentinel() {
    let primary = RedisServer::start();
    let sentinel = start_sentinel(&primary).await;
    let url = format!("redis://127.0.0.1:{}/", sentinel.port);
    let locks = LockManager::builder()
        .url(primary.url())
        .process_label("behind-sentinel")
        .build()
        .await
        .expect("manager");
    let guard = locks
        .acquire("s:1", &LockOptions::new(Duration::from_secs(30)))
        .await
        .expect("acquire");
    let records = json(&["--sentinel", &url, "--master", "orders", "list", "--json"]).await;
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["key"], "lock:s:1");
    assert_eq!(records[0]["label"], "behind-sentinel");
    fails_with(
        &["--sentinel", &url, "--master", "nope", "list"],
        &["cannot connect", "master `nope`"],
    )
    .await;
    guard.release().await.expect("release");
}
