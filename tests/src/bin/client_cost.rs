//! Client-side CPU cost of one uncontended `acquire` + `release` on a single node.
//!
//! `client_cost [N] [floor]` starts a private `redis-server`, builds a [`LockManager`] with the default
//! options, warms up (100 pairs), then runs `N` (default 2000) sequential
//! `acquire` + `release` pairs on distinct keys (`LockOptions::new(Duration::from_secs(10))`)
//! on a current-thread tokio runtime, and prints `client_cost: pairs=N`.
//!
//! Instructions are counted with callgrind, client only (the server is a child process and is
//! not traced), at two values of `N`; the difference cancels start-up and warm-up:
//!
//! ```text
//! CARGO_PROFILE_RELEASE_DEBUG=line-tables-only cargo build --release -p lockcore-tests --bin client_cost
//! for n in 2000 4000; do
//!   valgrind --tool=callgrind --trace-children=no --callgrind-out-file=cg.$n \
//!     ${CARGO_TARGET_DIR:-target}/release/client_cost $n
//! done
//! # instructions per acquire+release = (I(4000) - I(2000)) / 2000, I = the "Collected" total:
//! echo $(( ($(grep -oP '^summary: \K\d+' cg.4000) - $(grep -oP '^summary: \K\d+' cg.2000)) / 2000 ))
//! callgrind_annotate --inclusive=yes cg.4000 | head -60
//! ```
//!
//! With `floor` it runs the same pairs without lockcore: `SET key token NX PX 10000` and an
//! `EVALSHA` of a compare-and-delete script on one redis-rs `ConnectionManager`, the least a
//! lock client can send, to compare against.
//!
//! (`line-tables-only` only names the inlined code in the profile; the count is the same
//! without it.) The figure is deterministic to about ±10 instructions from run to run. The cost
//! work took it from 52,079 to 51,345 (redis 1.8.1, tokio 1.54.1, default options: hand-off on,
//! fencing per prefix, no watchdog, no tracing subscriber).

use std::fmt::Write as _;
use std::time::Duration;

use lockcore::{LockManager, LockOptions};
use lockcore_tests::RedisServer;

/// Warm-up pairs before the measured ones (connection, script load, allocator pools).
const WARM_UP: usize = 100;

fn main() {
    let pairs: usize = std::env::args().nth(1).map_or(2000, |n| {
        n.parse()
            .unwrap_or_else(|_| panic!("N must be a number, not {n:?}"))
    });
    let floor = std::env::args().nth(2).is_some_and(|mode| mode == "floor");
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|err| panic!("tokio runtime: {err}"));
    runtime.block_on(async {
        if floor {
            let client =
                redis::Client::open(server.url()).unwrap_or_else(|err| panic!("client: {err}"));
            let mut conn = redis::aio::ConnectionManager::new(client)
                .await
                .unwrap_or_else(|err| panic!("connection: {err}"));
            let mut key = String::with_capacity(32);
            run_floor(&mut conn, &mut key, "warm", WARM_UP).await;
            run_floor(&mut conn, &mut key, "cost", pairs).await;
            return;
        }
        let locks = LockManager::builder()
            .url(server.url())
            .build()
            .await
            .unwrap_or_else(|err| panic!("manager: {err}"));
        let opts = LockOptions::new(Duration::from_secs(10));
        let mut key = String::with_capacity(32);
        run(&locks, &opts, &mut key, "warm", WARM_UP).await;
        run(&locks, &opts, &mut key, "cost", pairs).await;
    });
    println!("client_cost: pairs={pairs}");
}

/// `n` sequential acquire + release pairs on the distinct keys `<tag>:0` .. `<tag>:<n-1>`.
async fn run(locks: &LockManager, opts: &LockOptions, key: &mut String, tag: &str, n: usize) {
    for i in 0..n {
        key.clear();
        let _ = write!(key, "{tag}:{i}");
        let guard = locks
            .acquire(key, opts)
            .await
            .unwrap_or_else(|err| panic!("acquire {key}: {err}"));
        guard
            .release()
            .await
            .unwrap_or_else(|err| panic!("release {key}: {err}"));
    }
}

/// `n` sequential `SET NX PX` + compare-and-delete pairs without lockcore.
async fn run_floor(
    conn: &mut redis::aio::ConnectionManager,
    key: &mut String,
    tag: &str,
    n: usize,
) {
    let release = redis::Script::new(lockcore_tests::lua::COMPARE_AND_DELETE);
    for i in 0..n {
        key.clear();
        let _ = write!(key, "{tag}:{i}");
        let token = format!("{:032x}", fastrand::u128(..));
        let set: Option<String> = redis::cmd("SET")
            .arg(&*key)
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(10_000)
            .query_async(conn)
            .await
            .unwrap_or_else(|err| panic!("SET {key}: {err}"));
        assert!(set.is_some(), "{key} was free");
        let deleted: i64 = release
            .key(&*key)
            .arg(&token)
            .invoke_async(conn)
            .await
            .unwrap_or_else(|err| panic!("release {key}: {err}"));
        assert_eq!(deleted, 1, "{key} released");
    }
}
