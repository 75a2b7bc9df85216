//! Redlock fencing tokens across quorums whose counters drifted apart, and
//! options Redlock cannot honour. Three real `redis-server` processes behind fault proxies; a
//! proxy that delays requests past the node timeout is a node that is briefly unreachable (its
//! commands still run, late, as on a real network).

use std::time::Duration;

use lockcore::{LockError, LockManager, LockOptions};
use lockcore_tests::*;
use lockcore_tests::{Direction, FaultProxy};

async fn three_nodes() -> (Vec<RedisServer>, Vec<FaultProxy>, LockManager) {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let mut proxies = Vec::new();
    for server in &servers {
        proxies.push(FaultProxy::start(server).await);
    }
    let urls: Vec<String> = proxies.iter().map(FaultProxy::url).collect();
    let locks = LockManager::builder()
        .nodes(&urls)
        .node_timeout(Duration::from_millis(100))
        .build()
        .await
        .unwrap_or_else(|e| panic!("build a Redlock manager: {e}"));
    (servers, proxies, locks)
}

fn once() -> LockOptions {
    LockOptions::new(Duration::from_secs(5)).wait(Duration::ZERO)
}

/// The sequence of the review: attempts that lose the quorum drive node A's counter to 50
/// while B and C stay near 0; `k` is then acquired once with quorum {A, B} and once with
/// quorum {B, C}. The second token must be the larger one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_increase_across_quorums_with_drifted_counters() {
    let (servers, proxies, locks) = three_nodes().await;
    let (a, c) = (&proxies[0], &proxies[2]);
    // Another client holds `other` on B and C; every attempt on it wins A only.
    for server in &servers[1..] {
        let mut raw = server.connection().await;
        set_px(&mut raw, &full("other"), "someone-else", 60_000).await;
    }
    for _ in 0..50 {
        let attempt = locks.try_acquire("other", &once()).await;
        assert!(matches!(attempt, Ok(None)), "attempt on other: {attempt:?}");
    }
    let unreachable = Duration::from_millis(400);
    c.set_latency(Direction::Requests, unreachable);
    let first = locks
        .try_acquire("k", &once())
        .await
        .unwrap_or_else(|e| panic!("acquire k with quorum {{A, B}}: {e}"))
        .unwrap_or_else(|| panic!("k is free"));
    let first_token = first.fencing_token();
    assert!(first.release().await.is_ok());
    c.heal();
    c.settled().await;
    a.set_latency(Direction::Requests, unreachable);
    let second = locks
        .try_acquire("k", &once())
        .await
        .unwrap_or_else(|e| panic!("acquire k with quorum {{B, C}}: {e}"))
        .unwrap_or_else(|| panic!("k is free"));
    let second_token = second.fencing_token();
    let _ = second.release().await;
    a.heal();
    a.settled().await;
    assert!(
        second_token > first_token,
        "a later acquisition of `k` got fencing token {second_token}, not above the earlier {first_token}: \
         the stale holder would win at every fence"
    );
}

/// Redlock with a ttl at or below the drift allowance (ttl·1 % + 2 ms) has no validity left:
/// it is refused as `InvalidOptions` before any network call, never reported as `Contended`
/// on a free key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_refuses_a_ttl_without_validity() {
    let (_servers, _proxies, locks) = three_nodes().await;
    for ttl_ms in [1, 2] {
        let opts = LockOptions::new(Duration::from_millis(ttl_ms)).wait(Duration::from_millis(50));
        let acquired = locks.acquire("tiny", &opts).await;
        match acquired {
            Err(LockError::InvalidOptions { reason }) => {
                assert!(reason.contains("ttl"), "the reason names the ttl: {reason}");
            }
            other => {
                panic!("ttl {ttl_ms} ms under Redlock: expected InvalidOptions, got {other:?}")
            }
        }
    }
    // A ttl that leaves validity works.
    let opts = LockOptions::new(Duration::from_millis(200)).wait(Duration::ZERO);
    let guard = locks.try_acquire("tiny", &opts).await;
    assert!(matches!(guard, Ok(Some(_))), "ttl 200 ms: {guard:?}");
}
