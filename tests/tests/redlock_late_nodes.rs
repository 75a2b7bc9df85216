//! Redlock's late nodes: a round is won as soon as a quorum answered, but the `SET`s to the
//! other nodes are still sent and finished (in the background, within the node timeout), so
//! the lock lives on every live node, not on a bare quorum that one restart without
//! persistence would break; and the watchdog renews it on all of them.
//!
//! The late nodes sit behind `FaultProxy` latency, below the node timeout, and the manager is
//! fresh: its connection to a slow node is still opening, and the acquire script not yet in
//! that node's cache (`NOSCRIPT`, then `SCRIPT LOAD` and the call again), when the fast nodes
//! have already won the round. Those requests are not on the wire yet at that moment; a round
//! that drops its late futures never sends them. The twin without slow nodes shows that every
//! node takes part when nothing is late.

use std::time::Duration;

use lockcore::{LockGuard, LockManager, LockOptions};
use lockcore_tests::{Direction, FaultProxy, RedisServer, full, get, pttl};
use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

const NODES: usize = 5;
/// Below the node timeout even for a first call through a slow proxy (connect, `NOSCRIPT`,
/// `SCRIPT LOAD`, the call again: four round trips of twice the latency).
const NODE_TIMEOUT: Duration = Duration::from_millis(900);
const LATENCY: Duration = Duration::from_millis(40);
/// How long every node gets to show the lock after the acquire returned.
const WITHIN: Duration = Duration::from_secs(3);

struct Nodes {
    servers: Vec<RedisServer>,
    proxies: Vec<FaultProxy>,
    raw: Vec<MultiplexedConnection>,
    manager: LockManager,
}

/// Five servers behind proxies, the last `slow` of them with `LATENCY` each way, and a fresh
/// Redlock manager over the proxies (nothing connected or cached yet).
async fn nodes(slow: usize) -> Nodes {
    let servers: Vec<RedisServer> = (0..NODES).map(|_| RedisServer::start()).collect();
    let mut proxies = Vec::new();
    let mut raw = Vec::new();
    for server in &servers {
        proxies.push(FaultProxy::start(server).await);
        raw.push(server.connection().await);
    }
    for proxy in &proxies[NODES - slow..] {
        proxy.set_latency(Direction::Requests, LATENCY);
        proxy.set_latency(Direction::Replies, LATENCY);
    }
    let manager = LockManager::builder()
        .nodes(proxies.iter().map(FaultProxy::url))
        .node_timeout(NODE_TIMEOUT)
        .build()
        .await
        .unwrap_or_else(|e| panic!("build a Redlock manager: {e}"));
    Nodes {
        servers,
        proxies,
        raw,
        manager,
    }
}

/// The nodes (indexes) whose `key` holds `value`.
async fn holding(raw: &mut [MultiplexedConnection], key: &str, value: &str) -> Vec<usize> {
    let mut on = Vec::new();
    for (i, con) in raw.iter_mut().enumerate() {
        if get(con, key).await.as_deref() == Some(value) {
            on.push(i);
        }
    }
    on
}

/// Polls (every 20 ms, at most `WITHIN` after `since`: Redis gives no signal) until every node
/// holds the guard's value; returns the nodes that hold it at the end.
async fn held_everywhere(nodes: &mut Nodes, guard: &LockGuard, since: Instant) -> Vec<usize> {
    loop {
        let on = holding(&mut nodes.raw, guard.key(), guard.stored_value()).await;
        if on.len() == NODES || since.elapsed() > WITHIN {
            return on;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn acquire_and_count(slow: usize, key: &str) -> Vec<usize> {
    let mut nodes = nodes(slow).await;
    let opts = LockOptions::new(Duration::from_secs(10)).wait(Duration::ZERO);
    let guard = nodes
        .manager
        .try_acquire(key, &opts)
        .await
        .unwrap_or_else(|e| panic!("acquire: {e}"))
        .unwrap_or_else(|| panic!("nobody else holds {key}"));
    let acquired = Instant::now();
    let on = held_everywhere(&mut nodes, &guard, acquired).await;
    for proxy in &nodes.proxies {
        proxy.settled().await;
    }
    guard
        .release()
        .await
        .unwrap_or_else(|e| panic!("release: {e}"));
    on
}

/// Two slow nodes answer after the quorum of three fast ones has won: their `SET`s still
/// land, and every node holds the lock's value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_won_rounds_late_nodes_hold_the_lock() {
    let on = acquire_and_count(2, "late:one").await;
    assert_eq!(
        on.len(),
        NODES,
        "only {} of {NODES} live nodes hold the lock {WITHIN:?} after acquire (nodes {on:?}); the slow nodes 3 and 4 never got its SET",
        on.len()
    );
}

/// The twin: with no slow node, every node holds the lock too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_slow_nodes_every_node_holds_the_lock() {
    let on = acquire_and_count(0, "late:none").await;
    assert_eq!(on.len(), NODES, "nodes holding the lock: {on:?}");
}

/// A watchdog-renewed lease of 1.5 s with one slow node: once every node holds it, it is
/// still on every node two TTLs later, with a live TTL: the renewals went to the late node
/// too, not only to the nodes that answered the acquire in time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_renews_the_lock_on_late_nodes() {
    let ttl = Duration::from_millis(1_500);
    let mut nodes = nodes(1).await;
    let opts = LockOptions::new(ttl).wait(Duration::ZERO).watchdog(true);
    let guard = nodes
        .manager
        .try_acquire("late:renewed", &opts)
        .await
        .unwrap_or_else(|e| panic!("acquire: {e}"))
        .unwrap_or_else(|| panic!("nobody else holds the key"));
    let acquired = Instant::now();
    let on = held_everywhere(&mut nodes, &guard, acquired).await;
    assert_eq!(
        on.len(),
        NODES,
        "only {} of {NODES} live nodes hold the lock after acquire (nodes {on:?})",
        on.len()
    );
    // Two TTLs: without renewal on a node, its key would be gone by then.
    tokio::time::sleep_until(acquired + ttl * 2).await;
    let key = full("late:renewed");
    let on = holding(&mut nodes.raw, &key, guard.stored_value()).await;
    let mut ttls = Vec::new();
    for con in &mut nodes.raw {
        ttls.push(pttl(con, &key).await);
    }
    assert_eq!(
        on.len(),
        NODES,
        "two TTLs after acquire, the renewed lock is on nodes {on:?} only (PTTLs {ttls:?})"
    );
    assert!(
        ttls.iter().all(|&ms| ms > 0),
        "every node renewed the lease: PTTLs {ttls:?}"
    );
    assert!(guard.is_held(), "the watchdog kept the lease");
    guard
        .release()
        .await
        .unwrap_or_else(|e| panic!("release: {e}"));
}

/// A release right after the acquire overtakes the slow nodes' `SET`s, which are still
/// waiting for their connection and script: once every node has run what it was sent, none
/// holds the released lock (each late `SET` that ran after the release was taken back), so no
/// later contender finds it there until its TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_overtakes_the_late_sets_leaves_nothing_behind() {
    let mut nodes = nodes(2).await;
    let opts = LockOptions::new(Duration::from_secs(30)).wait(Duration::ZERO);
    let guard = nodes
        .manager
        .try_acquire("late:released", &opts)
        .await
        .unwrap_or_else(|e| panic!("acquire: {e}"))
        .unwrap_or_else(|| panic!("nobody else holds the key"));
    let (key, value) = (guard.key().to_owned(), guard.stored_value().to_owned());
    guard
        .release()
        .await
        .unwrap_or_else(|e| panic!("release: {e}"));
    // Polls (every 20 ms, at most `WITHIN`): the slow nodes run their requests within about
    // ten round trips, and Redis gives no signal.
    let started = Instant::now();
    let on = loop {
        for proxy in &nodes.proxies {
            proxy.settled().await;
        }
        let on = holding(&mut nodes.raw, &key, &value).await;
        if started.elapsed() > WITHIN {
            break on;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        on.is_empty(),
        "{WITHIN:?} after the release, nodes {on:?} still hold the released lock"
    );
}

/// Why it matters: node 0, one of the fast nodes that won the round, restarts without
/// persistence and forgets the lock. The lock lives on every node, so four still hold it and a
/// second client wins nothing. (On a bare quorum of nodes 0 to 2, the second client would win
/// nodes 0, 3 and 4 while the first still holds the lock: `redlock.rs` shows that case.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_holder_node_restarting_without_persistence_leaves_the_lock_held() {
    let mut nodes = nodes(2).await;
    let opts = LockOptions::new(Duration::from_secs(20)).wait(Duration::ZERO);
    let first = nodes
        .manager
        .try_acquire("late:restart", &opts)
        .await
        .unwrap_or_else(|e| panic!("acquire: {e}"))
        .unwrap_or_else(|| panic!("nobody else holds the key"));
    // Until every node holds it, at most `WITHIN`: the assertion is on the second client.
    let on = held_everywhere(&mut nodes, &first, Instant::now()).await;
    nodes.servers[0].restart();
    let second = LockManager::builder()
        .nodes(nodes.servers.iter().map(RedisServer::url))
        .node_timeout(NODE_TIMEOUT)
        .build()
        .await
        .unwrap_or_else(|e| panic!("build the second Redlock manager: {e}"));
    let won = second
        .try_acquire("late:restart", &opts)
        .await
        .unwrap_or_else(|e| panic!("the second client's attempt: {e}"));
    assert!(
        won.is_none(),
        "after node 0 restarted, a second client won the lock that the first still holds (it was on nodes {on:?})"
    );
    assert!(first.is_held());
}
