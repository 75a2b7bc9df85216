//! Redlock over N real `redis-server` processes: quorum arithmetic, cleanup of a partial
//! acquisition with a slow node, drift and slow nodes, contention with an overlap
//! checker, and the restart-without-persistence case that Redlock's assumptions exclude.
//!
//! Faults come from `lockcore_tests::FaultProxy` (latency, blackhole) or from stopping and
//! restarting the servers. `FaultProxy::settled` is the signal that a slow node has run
//! everything sent to it; latency itself is the scenario, never a synchronisation.

// Test helpers outside `#[test]` fns may panic on failure too.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockcore::{LockError, LockManager, LockOptions};
use lockcore_tests::*;
use lockcore_tests::{Direction, FaultProxy};
use redis::aio::MultiplexedConnection;
use tokio::sync::Barrier;
use tokio::task::JoinSet;
use tokio::time::Instant;

// ---- helpers ----------------------------------------------------------------------------------

/// `n` private servers with the same extra args.
fn start_servers(n: usize, args: &[&str]) -> Vec<RedisServer> {
    (0..n).map(|_| RedisServer::start_with_args(args)).collect()
}

async fn proxies_for(servers: &[RedisServer]) -> Vec<FaultProxy> {
    let mut proxies = Vec::with_capacity(servers.len());
    for server in servers {
        proxies.push(FaultProxy::start(server).await);
    }
    proxies
}

async fn connections(servers: &[RedisServer]) -> Vec<MultiplexedConnection> {
    let mut cons = Vec::with_capacity(servers.len());
    for server in servers {
        cons.push(server.connection().await);
    }
    cons
}

/// A Redlock manager over `urls` with a per-node timeout.
async fn redlock<S: AsRef<str>>(urls: &[S], node_timeout: Duration) -> LockManager {
    LockManager::builder()
        .nodes(urls)
        .node_timeout(node_timeout)
        .build()
        .await
        .unwrap_or_else(|e| panic!("build a Redlock manager: {e}"))
}

fn urls_of(proxies: &[FaultProxy]) -> Vec<String> {
    proxies.iter().map(FaultProxy::url).collect()
}

/// One attempt, no waiting.
fn once(ttl: Duration) -> LockOptions {
    LockOptions::new(ttl).wait(Duration::ZERO)
}

/// The drift allowance of the Redlock spec: ttl·1 % + 2 ms.
fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// Every key on the node except the fencing counter, with its value. The counter
/// (`lock:__fencing_counter__`) is INCR'ed by the acquire script on each node where a `SET`
/// won; it is not a lock, and it must outlive every release (otherwise fencing tokens would
/// start again from 1), so "no keys left" means "no lock keys left".
async fn lock_keys(con: &mut MultiplexedConnection) -> Vec<(String, Option<String>)> {
    let keys: Vec<String> = query(con, redis::cmd("KEYS").arg("*")).await;
    let mut out = Vec::new();
    for key in keys {
        if key != fencing_counter_key() {
            let value = get(con, &key).await;
            out.push((key, value));
        }
    }
    out
}

/// How many nodes hold `token` under `key`.
async fn holding(cons: &mut [MultiplexedConnection], key: &str, token: &str) -> usize {
    let mut n = 0;
    for con in cons {
        n += usize::from(get(con, key).await.as_deref() == Some(token));
    }
    n
}

async fn settle_all(proxies: &[FaultProxy]) {
    for proxy in proxies {
        proxy.settled().await;
    }
}

/// Runs every Lua script on every node, with no faults on. Redlock nodes connect lazily and do
/// not preload the scripts, so a node's first `EVALSHA` gets `NOSCRIPT` and costs two more round
/// trips (`SCRIPT LOAD`, `EVALSHA`); on a node that is slower than the node timeout they never
/// fit, and that node would never take part. The tests want a node that is slow *now*.
async fn warm_up(manager: &LockManager, nodes: &mut [MultiplexedConnection]) {
    let opts = LockOptions::new(Duration::from_secs(5)).wait(Duration::from_secs(5));
    // Bounded: every round runs ACQUIRE on a quorum; a few rounds reach every node.
    for _ in 0..20 {
        let mut guard = must_acquire(manager, "warm-up", &opts).await;
        guard
            .extend(Duration::from_secs(5))
            .await
            .expect("warm-up extend"); // RENEW, all nodes
        guard.release().await.expect("warm-up release"); // RELEASE, all nodes
        let mut all = true;
        for con in nodes.iter_mut() {
            all &= acquisitions_seen_by_redis(con).await > 0; // ACQUIRE ran here
        }
        if all {
            return;
        }
    }
    panic!("the acquire script did not reach every node in 20 rounds");
}

/// One holder's time in the critical section, on the monotonic clock: from after its acquire
/// returned to before its release was sent. The lock was held in Redis for at least that long,
/// so two overlapping intervals mean two holders at once.
#[derive(Debug, Clone)]
struct Interval {
    holder: String,
    start: std::time::Instant,
    end: std::time::Instant,
}

/// Every pair of overlapping intervals `[start, end)`.
fn overlaps(intervals: &[Interval]) -> Vec<(String, String)> {
    let mut sorted: Vec<&Interval> = intervals.iter().collect();
    sorted.sort_by_key(|i| i.start);
    let mut found = Vec::new();
    for (i, a) in sorted.iter().enumerate() {
        for b in &sorted[i + 1..] {
            if b.start >= a.end {
                break; // sorted by start: no later interval overlaps `a`
            }
            found.push((a.holder.clone(), b.holder.clone()));
        }
    }
    found
}

#[test]
fn the_overlap_checker_sees_overlaps_and_only_them() {
    let t0 = std::time::Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let iv = |h: &str, s, e| Interval {
        holder: h.into(),
        start: at(s),
        end: at(e),
    };
    assert!(overlaps(&[iv("a", 0, 10), iv("b", 10, 20), iv("c", 20, 30)]).is_empty());
    assert_eq!(
        overlaps(&[iv("b", 5, 12), iv("a", 0, 10), iv("c", 20, 30)]),
        vec![("a".to_owned(), "b".to_owned())]
    );
    assert_eq!(
        overlaps(&[iv("a", 0, 100), iv("b", 10, 20), iv("c", 30, 40)]).len(),
        2
    );
}

/// Five nodes behind fault proxies (no fault yet), raw connections to the servers, and
/// `managers` Redlock managers, each warmed up: connected to every node, scripts cached.
struct Cluster {
    _servers: Vec<RedisServer>,
    proxies: Vec<FaultProxy>,
    raw: Vec<MultiplexedConnection>,
    managers: Vec<LockManager>,
}

async fn cluster(managers: usize, node_timeout: Duration) -> Cluster {
    let servers = start_servers(5, &[]);
    let proxies = proxies_for(&servers).await;
    let urls = urls_of(&proxies);
    let mut raw = connections(&servers).await;
    let mut all = Vec::new();
    for _ in 0..managers {
        let manager = redlock(&urls, node_timeout).await;
        warm_up(&manager, &mut raw).await;
        all.push(manager);
    }
    Cluster {
        _servers: servers,
        proxies,
        raw,
        managers: all,
    }
}

// ---- quorum arithmetic ------------------------------------------------------------------------

/// For N in 1..=5 and every k in 0..=N, stop k of the N nodes. The quorum is N/2 + 1 of the
/// *configured* N: acquire succeeds exactly when N − k ≥ quorum. Below it, `QuorumUnreachable`
/// comes after the first round (well inside the 10 s wait budget) and no lock key is left on
/// the live nodes. N = 5 with 2 stopped still acquires; N = 2 with 1 stopped does not (N = 2
/// tolerates no fault). N = 1 is the single-node mode: a stopped node fails with `Redis(..)`.
#[tokio::test]
async fn c19_quorum_arithmetic() {
    let mut servers = start_servers(5, &[]);
    let node_timeout = Duration::from_millis(250);
    let opts = LockOptions::new(Duration::from_secs(10))
        .wait(Duration::from_secs(10))
        .retry_base(Duration::from_millis(20));
    let mut table = Vec::new();
    for n in 1..=5usize {
        let quorum = n / 2 + 1;
        for k in 0..=n {
            if k > 0 {
                servers[n - k].stop(); // nodes n-k..n are down
            }
            let urls: Vec<String> = servers[..n].iter().map(RedisServer::url).collect();
            let key = format!("c19:n{n}:k{k}");
            let started = Instant::now();
            let result = match LockManager::builder()
                .nodes(&urls)
                .node_timeout(node_timeout)
                .build()
                .await
            {
                Ok(manager) => manager.acquire(&key, &opts).await,
                Err(e) => Err(e), // N = 1 connects at once
            };
            let elapsed = started.elapsed();
            let mut live = connections(&servers[..n - k]).await;
            let live_count = n - k;
            table.push(format!(
                "N={n} k={k} quorum={quorum}: {} in {elapsed:?}",
                match &result {
                    Ok(_) => "acquired".to_owned(),
                    Err(e) => format!("{e}"),
                }
            ));
            if live_count >= quorum {
                let guard = result.unwrap_or_else(|e| {
                    panic!("N={n} k={k}: {live_count} live ≥ quorum {quorum}: {e:?}")
                });
                let on = holding(&mut live, &full(&key), guard.stored_value()).await;
                assert!(
                    on >= quorum,
                    "N={n} k={k}: token on {on} nodes, quorum {quorum}"
                );
                assert!(guard.fencing_token() >= 1);
                guard
                    .release()
                    .await
                    .unwrap_or_else(|e| panic!("N={n} k={k}: release: {e:?}"));
            } else {
                let err = result.err().unwrap_or_else(|| {
                    panic!("N={n} k={k}: acquired with {live_count} live < quorum {quorum}")
                });
                if n == 1 {
                    assert!(err.is_redis(), "N=1, node down: {err:?}");
                } else {
                    // `reachable` is checked separately (c19_quorum_unreachable_counts_only_live_nodes).
                    assert!(
                        matches!(err, LockError::QuorumUnreachable { reachable, needed }
                            if reachable < needed && needed == quorum),
                        "N={n} k={k}: {err:?}"
                    );
                }
                assert!(
                    elapsed < Duration::from_secs(2),
                    "N={n} k={k}: QuorumUnreachable after {elapsed:?}: not after the first round"
                );
            }
            for (i, con) in live.iter_mut().enumerate() {
                let left = lock_keys(con).await;
                assert!(left.is_empty(), "N={n} k={k}: node {i} still has {left:?}");
            }
        }
        for server in &mut servers[..n] {
            if !server.is_running() {
                server.restart();
            }
        }
    }
    eprintln!("{}", table.join("\n"));
}

/// The error's count: with every node of N = 2..=5 down, `QuorumUnreachable` must report
/// `reachable: 0` ("nodes that answered in the round"), not count nodes whose failure had not
/// arrived yet when the round was decided.
#[tokio::test]
async fn c19_quorum_unreachable_counts_only_live_nodes() {
    let mut servers = start_servers(5, &[]);
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    for server in &mut servers {
        server.stop();
    }
    let mut reported = Vec::new();
    for n in 2..=5usize {
        let manager = redlock(&urls[..n], Duration::from_millis(250)).await;
        match manager
            .try_acquire("c19:down", &once(Duration::from_secs(10)))
            .await
        {
            Err(LockError::QuorumUnreachable { reachable, needed }) => {
                assert_eq!(needed, n / 2 + 1);
                reported.push((n, reachable));
            }
            other => panic!("N={n}, all down: {other:?}"),
        }
    }
    assert!(
        reported.iter().all(|&(_, reachable)| reachable == 0),
        "(N, reachable) with every node down: {reported:?}"
    );
}

// ---- partial acquisition cleanup --------------------------------------------------------------

const C20_NODE_TIMEOUT: Duration = Duration::from_millis(50);
const C20_SLOW: Duration = Duration::from_millis(300);

/// N = 5, node 4 answers after 300 ms (alternately: its requests, so `SET`s land late, and
/// its replies), node timeout 50 ms. A and B race for `res:1` for 50 rounds. After each attempt
/// the fast nodes hold no loser's token; after each round, once the slow node has run
/// everything it was sent, no node holds any token (a loser's `SET` that landed on the slow node
/// after the round was followed by its cleanup).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c20_partial_cleanup_with_one_slow_node() {
    let Cluster {
        proxies,
        mut raw,
        managers,
        _servers,
    } = cluster(2, C20_NODE_TIMEOUT).await;
    let (a, b) = (&managers[0], &managers[1]);
    let (fast, slow) = proxies.split_at(4);
    let slow = &slow[0];
    let key = full("res:1");
    let opts = once(Duration::from_secs(2));
    let slow_acquisitions_before = acquisitions_seen_by_redis(&mut raw[4]).await;
    let (mut a_wins, mut b_wins, mut none) = (0, 0, 0);

    for round in 0..50 {
        let (late, other) = if round % 2 == 0 {
            (Direction::Requests, Direction::Replies)
        } else {
            (Direction::Replies, Direction::Requests)
        };
        slow.set_latency(late, C20_SLOW);
        slow.set_latency(other, Duration::ZERO);

        let (ga, gb) = tokio::join!(a.try_acquire("res:1", &opts), b.try_acquire("res:1", &opts));
        let winner = match (ga.expect("A's attempt"), gb.expect("B's attempt")) {
            (Some(_), Some(_)) => panic!("round {round}: two holders"),
            (Some(g), None) => {
                a_wins += 1;
                Some(g)
            }
            (None, Some(g)) => {
                b_wins += 1;
                Some(g)
            }
            (None, None) => {
                none += 1;
                None
            }
        };

        // The fast nodes: the winner's token or nothing (the loser's cleanup was awaited).
        settle_all(fast).await;
        for (i, con) in raw[..4].iter_mut().enumerate() {
            let value = get(con, &key).await;
            let winner_token = winner.as_ref().map(|g| g.stored_value());
            assert!(
                value.is_none() || value.as_deref() == winner_token,
                "round {round} ({late:?} late): fast node {i} holds {value:?}; winner {winner_token:?}"
            );
        }
        if let Some(guard) = &winner {
            let on = holding(&mut raw[..4], &key, guard.stored_value()).await;
            assert!(
                on >= 3,
                "round {round}: the winner holds only {on} fast nodes"
            );
        }
        if let Some(guard) = winner {
            guard
                .release()
                .await
                .expect("the winner releases on a quorum");
        }

        // Every node, the slow one included once it has answered: no token at all.
        settle_all(&proxies).await;
        for (i, con) in raw.iter_mut().enumerate() {
            let value = get(con, &key).await;
            assert!(
                value.is_none(),
                "round {round} ({late:?} late): node {i} still holds {value:?} after settling"
            );
        }
    }
    let slow_acquisitions =
        acquisitions_seen_by_redis(&mut raw[4]).await - slow_acquisitions_before;
    eprintln!(
        "partial cleanup: 50 rounds: A won {a_wins}, B won {b_wins}, neither {none}; \
         SETs that won on the slow node: {slow_acquisitions}"
    );
    assert!(slow_acquisitions > 0, "the slow node never took part");
    assert!(a_wins + b_wins > 0, "nobody ever won");
}

/// The deterministic case and its twin. Another holder has `res:2` on fast nodes 2 and 3,
/// so a contender wins fast nodes 0 and 1 and needs the slow node's vote, which comes too late:
/// it loses, after its `SET` was sent to the slow node, where it wins once it lands.
/// - lockcore: once the slow node has answered, nodes 0, 1 and 4 hold no token of the loser;
/// - twin, a naive client that gives up without cleaning up: its token stays on nodes 0 and 1,
///   and on the slow node, blocking every later contender until its TTL ends.
#[tokio::test]
async fn c20_late_set_on_the_slow_node_is_cleaned_up_twin_naive_leaves_it() {
    let Cluster {
        proxies,
        mut raw,
        managers,
        _servers,
    } = cluster(1, C20_NODE_TIMEOUT).await;
    let b = &managers[0];
    let slow = &proxies[4];

    for late in [Direction::Requests, Direction::Replies] {
        let key = format!("res:2:{late:?}");
        let full_key = full(&key);
        for con in &mut raw[2..4] {
            set_px(con, &full_key, "other-holder", 20_000).await;
        }
        slow.set_latency(late, C20_SLOW);
        let started = Instant::now();
        let attempt = b.try_acquire(&key, &once(Duration::from_secs(10))).await;
        assert!(matches!(attempt, Ok(None)), "{late:?}: {attempt:?}");
        assert!(
            started.elapsed() < C20_SLOW,
            "the loser did not wait for the slow node"
        );
        settle_all(&proxies).await;
        slow.set_latency(late, Duration::ZERO);
        for i in [0, 1, 4] {
            let left = lock_keys(&mut raw[i]).await;
            assert!(
                left.is_empty(),
                "{late:?}: node {i} holds the loser's {left:?}"
            );
        }
    }

    // The twin: the same attempt without cleanup.
    let key = full("res:2:naive");
    for con in &mut raw[2..4] {
        set_px(con, &key, "other-holder", 20_000).await;
    }
    let mut through = Vec::new();
    for proxy in &proxies {
        through.push(
            redis::Client::open(proxy.url())
                .unwrap()
                .get_multiplexed_async_connection()
                .await
                .unwrap(),
        );
    }
    slow.set_latency(Direction::Requests, C20_SLOW);
    let naive_token = "naive-loser";
    let mut votes = 0;
    let sets = through.iter().map(|con| {
        let mut con = con.clone();
        let key = key.clone();
        async move {
            let set = naive_set_nx(&key, naive_token, 10_000);
            let set = set.query_async::<Option<String>>(&mut con);
            matches!(
                tokio::time::timeout(C20_NODE_TIMEOUT, set).await,
                Ok(Ok(Some(_)))
            )
        }
    });
    for won in futures_util::future::join_all(sets).await {
        votes += usize::from(won);
    }
    assert_eq!(
        votes, 2,
        "the naive client wins nodes 0 and 1 only, in time"
    );
    // It lost (2 < 3) and gives up without a cleanup.
    settle_all(&proxies).await;
    let stranded = holding(&mut raw, &key, naive_token).await;
    assert_eq!(
        stranded, 3,
        "without cleanup the loser's token stays on nodes 0, 1 and the slow node"
    );
    assert_eq!(get(&mut raw[4], &key).await.as_deref(), Some(naive_token));
}

// ---- drift and slow nodes ---------------------------------------------------------------------

const C21_NODE_TIMEOUT: Duration = Duration::from_millis(200);
const C21_SLOW: Duration = Duration::from_millis(150);
/// Scheduling slack for timing bounds on a loaded 2-core machine. A serial fan-out (the bug
/// these bounds catch) would cost another whole node timeout.
const SLACK: Duration = Duration::from_millis(100);
/// Time between the call and the start of its attempt (key check, token generation).
const CALL_OVERHEAD: Duration = Duration::from_millis(20);

/// The slow-node cluster: [`cluster`] with node 0 blackholed and node 1 answering 150 ms late.
async fn c21_cluster(managers: usize) -> Cluster {
    let cluster = cluster(managers, C21_NODE_TIMEOUT).await;
    cluster.proxies[0].set_blackhole(true);
    cluster.proxies[1].set_latency(Direction::Replies, C21_SLOW);
    cluster
}

/// Node 0 blackholed, node 1 answers 150 ms late, node timeout 200 ms, and another holder
/// on node 2, so that a quorum needs the slow node's vote.
/// - acquire waits for the slow node, never for the blackholed one: 150 ms ≤ latency ≤ node
///   timeout + slack (a serial fan-out would need 350 ms);
/// - validity = ttl − elapsed − drift, counted from the start of the attempt: the remaining
///   validity on return is at most ttl − elapsed;
/// - one blackholed node costs at most the node timeout for extend and a failed attempt too;
/// - extend succeeds with a quorum and fails (`Lost`) with only 2 of 5 renewing;
/// - an extend that completes after the validity is refused, although Redis renewed it on a
///   quorum (the twin: Redis alone would have said yes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c21_drift_and_slow_nodes() {
    let Cluster {
        proxies,
        mut raw,
        managers,
        _servers,
    } = c21_cluster(3).await;
    let (manager, other, third) = (&managers[0], &managers[1], &managers[2]);
    set_px(&mut raw[2], &full("res:21"), "other-holder", 60_000).await;

    let ttl = Duration::from_secs(10);
    let called = Instant::now();
    let mut guard = manager
        .try_acquire("res:21", &once(ttl))
        .await
        .expect("acquire")
        .expect("slow node + nodes 3, 4: a quorum");
    let elapsed = called.elapsed();
    eprintln!("slow nodes: acquire with a blackholed and a 150 ms node took {elapsed:?}");
    assert!(
        elapsed >= C21_SLOW,
        "a quorum needs the slow node: {elapsed:?}"
    );
    assert!(
        elapsed <= C21_NODE_TIMEOUT + SLACK,
        "a blackholed node costs at most the node timeout: {elapsed:?}"
    );
    let validity_from_call = guard.deadline() - called;
    assert!(
        validity_from_call <= ttl - drift(ttl) + CALL_OVERHEAD,
        "validity counted from the attempt start: deadline − call = {validity_from_call:?}"
    );
    assert!(
        validity_from_call >= ttl - drift(ttl),
        "{validity_from_call:?}"
    );
    assert!(
        guard.remaining() <= ttl - elapsed,
        "validity {:?} > ttl − elapsed {:?}",
        guard.remaining(),
        ttl - elapsed
    );

    // Extend with a quorum (slow node + 3 + 4): waits at most the blackholed node's timeout.
    let started = Instant::now();
    guard.extend(ttl).await.expect("extend with a quorum");
    let took = started.elapsed();
    assert!(took <= C21_NODE_TIMEOUT + SLACK, "extend took {took:?}");
    assert!(guard.deadline() - started <= ttl - drift(ttl) + CALL_OVERHEAD);
    assert!(guard.deadline() - started >= ttl - drift(ttl));

    // A failed attempt costs at most the node timeout too (its cleanup waits for node 0).
    let started = Instant::now();
    let contender = other.try_acquire("res:21", &once(ttl)).await;
    assert!(matches!(contender, Ok(None)), "{contender:?}");
    let took = started.elapsed();
    assert!(
        took <= C21_NODE_TIMEOUT + SLACK,
        "failed attempt took {took:?}"
    );

    // Without a quorum (node 3 blackholed too: only the slow node and node 4 renew) it fails.
    proxies[3].set_blackhole(true);
    let started = Instant::now();
    let refused = guard.extend(ttl).await;
    assert!(
        matches!(&refused, Err(e) if e.is_lost()),
        "extend with 2 of 5: {refused:?}"
    );
    assert!(started.elapsed() <= C21_NODE_TIMEOUT + SLACK);
    assert!(!guard.is_held());
    drop(guard);
    proxies[3].heal(); // resets the connection whose requests were swallowed

    // An extend that ends after the validity: refused, though Redis renewed it on a quorum.
    let (late, renewed_in_redis) = late_extend(third, &mut raw, "res:21b").await;
    assert!(
        renewed_in_redis >= 3,
        "twin: Redis renewed on {renewed_in_redis} nodes; only the validity check refuses it"
    );
    drop(late);
}

/// Takes `key` (another holder on node 2: the quorum needs the slow node), starts an extend to
/// 5 s 100 ms before the validity ends, and checks that it is refused: the slow node answers
/// after 150 ms. Returns the guard and on how many nodes Redis holds the token with the new
/// TTL.
async fn late_extend(
    manager: &LockManager,
    raw: &mut [MultiplexedConnection],
    key: &str,
) -> (lockcore::LockGuard, usize) {
    set_px(&mut raw[2], &full(key), "other-holder", 60_000).await;
    let mut late = manager
        .try_acquire(key, &once(Duration::from_secs(1)))
        .await
        .expect("acquire")
        .expect("slow node + nodes 3, 4");
    tokio::time::sleep_until(late.deadline() - Duration::from_millis(100)).await;
    let refused = late.extend(Duration::from_secs(5)).await;
    assert!(
        matches!(&refused, Err(e) if e.is_lost()),
        "an extend that completes after the deadline must fail: {refused:?}"
    );
    let mut renewed = 0;
    for con in raw.iter_mut() {
        if get(con, &full(key)).await.as_deref() == Some(late.stored_value())
            && pttl(con, &full(key)).await > 2_000
        {
            renewed += 1;
        }
    }
    (late, renewed)
}

/// The refused late extend: the guard reports `Lost`, but the renewal did reach a quorum,
/// so the nodes hold its token for the new TTL (5 s). Nobody holds the lock by its own account;
/// dropping the guard must still take the token back (as a Redlock acquire that won too late
/// does), so another contender gets the lock well before those 5 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c21_refused_late_extend_leaves_no_lock_behind() {
    let Cluster {
        proxies,
        mut raw,
        managers,
        _servers,
    } = c21_cluster(2).await;
    let (late, renewed) = late_extend(&managers[0], &mut raw, "res:21c").await;
    assert!(renewed >= 3, "setup: renewed on {renewed} nodes");
    drop(late);
    proxies[1].set_latency(Direction::Replies, Duration::ZERO);
    let started = Instant::now();
    let next = managers[1]
        .acquire(
            "res:21c",
            &LockOptions::new(Duration::from_secs(5)).wait(Duration::from_secs(2)),
        )
        .await;
    assert!(
        next.is_ok(),
        "the refused extend left its token on a quorum for the new TTL; another contender \
         waited {:?} and got {next:?}",
        started.elapsed()
    );
}

// ---- contention -------------------------------------------------------------------------------

const CONTENDERS: usize = 64;

/// The critical section: a non-atomic read-modify-write with a gap, and its interval.
async fn critical_section(counter: &AtomicU64) {
    let seen = counter.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(1)).await; // the gap other holders could use
    counter.store(seen + 1, Ordering::SeqCst);
}

/// Runs 64 contenders through the critical section at once (a barrier starts them), under the
/// lock on `managers` (round-robin), or without any lock when `managers` is empty. Returns every
/// holder's interval, the counter, and how long it took.
async fn run_contenders(managers: &[LockManager]) -> (Vec<Interval>, u64, Duration) {
    let opts = LockOptions::new(Duration::from_secs(5))
        .wait(Duration::from_secs(40))
        .retry_base(Duration::from_millis(5))
        .retry_cap(Duration::from_millis(50));
    let counter = Arc::new(AtomicU64::new(0));
    let intervals = Arc::new(Mutex::new(Vec::new()));
    let barrier = Arc::new(Barrier::new(CONTENDERS));
    let mut tasks = JoinSet::new();
    let started = Instant::now();
    for i in 0..CONTENDERS {
        let manager = (!managers.is_empty()).then(|| managers[i % managers.len()].clone());
        let (counter, intervals, barrier) = (counter.clone(), intervals.clone(), barrier.clone());
        let opts = opts.clone();
        tasks.spawn(async move {
            barrier.wait().await;
            let guard = match &manager {
                Some(manager) => Some(
                    manager
                        .acquire("hot", &opts)
                        .await
                        .unwrap_or_else(|e| panic!("contender {i}: {e:?}")),
                ),
                None => None,
            };
            let start = std::time::Instant::now();
            critical_section(&counter).await;
            let end = std::time::Instant::now();
            if let Some(guard) = guard {
                assert!(
                    Instant::now() < guard.deadline(),
                    "contender {i} outlived its validity"
                );
                guard
                    .release()
                    .await
                    .unwrap_or_else(|e| panic!("contender {i}: release: {e:?}"));
            }
            intervals.lock().unwrap().push(Interval {
                holder: format!("contender {i}"),
                start,
                end,
            });
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined.expect("contender task");
    }
    let intervals = intervals.lock().unwrap().clone();
    (intervals, counter.load(Ordering::SeqCst), started.elapsed())
}

/// Contention: 64 contenders (4 managers, as 4 processes would have, 16 tasks each) on N = 5.
/// Every holder's interval is recorded on the monotonic clock and no two overlap; the guarded
/// non-atomic counter is exact; every holder finished inside its validity.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contention_64_contenders_never_two_holders() {
    let servers = start_servers(5, &[]);
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let mut managers = Vec::new();
    for _ in 0..4 {
        managers.push(redlock(&urls, Duration::from_millis(250)).await);
    }
    let (intervals, counter, took) = run_contenders(&managers).await;
    eprintln!("contention: {CONTENDERS} holders on 5 nodes in {took:?}");
    assert_eq!(intervals.len(), CONTENDERS);
    assert_eq!(overlaps(&intervals), Vec::<(String, String)>::new());
    assert_eq!(counter, CONTENDERS as u64);
}

/// The twin: the same 64 contenders without the lock. The checker reports overlapping holders
/// and the counter loses updates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contention_twin_without_the_lock_overlaps_and_loses_updates() {
    let (intervals, counter, _) = run_contenders(&[]).await;
    assert!(
        !overlaps(&intervals).is_empty(),
        "no overlap without a lock?"
    );
    assert!(counter < CONTENDERS as u64, "counter {counter}");
}

// ---- restart without persistence --------------------------------------------------------------

struct RestartOutcome {
    intervals: Vec<Interval>,
    /// Whether B acquired while A still held the lock by its own clock.
    b_acquired_while_a_held: bool,
    a_fencing: u64,
    b_fencing: Option<u64>,
}

/// N = 3. A takes the lock on nodes 0 and 1 (its requests to node 2 go into a blackhole). Node
/// 1 restarts. B then tries on all three nodes while A still holds the lock by its own clock.
async fn restart_scenario(server_args: &[&str]) -> RestartOutcome {
    let mut servers = start_servers(3, server_args);
    let hole = FaultProxy::start(&servers[2]).await;
    hole.set_blackhole(true);
    let a = redlock(
        &[servers[0].url(), servers[1].url(), hole.url()],
        Duration::from_millis(200),
    )
    .await;
    let opts = once(Duration::from_secs(20));
    let ga = a
        .try_acquire("res:restart", &opts)
        .await
        .expect("A's acquire")
        .expect("A: nodes 0 and 1");
    let a_start = std::time::Instant::now();
    let a_fencing = ga.fencing_token();

    servers[1].restart();

    let b = redlock(
        &[servers[0].url(), servers[1].url(), servers[2].url()],
        Duration::from_millis(200),
    )
    .await;
    let gb = b
        .try_acquire("res:restart", &opts)
        .await
        .expect("B's attempt");
    let interval = |holder: &str, start, end| Interval {
        holder: holder.into(),
        start,
        end,
    };
    let mut outcome = RestartOutcome {
        intervals: Vec::new(),
        b_acquired_while_a_held: false,
        a_fencing,
        b_fencing: None,
    };
    if let Some(gb) = gb {
        let b_start = std::time::Instant::now();
        outcome.b_acquired_while_a_held = ga.is_held();
        outcome.b_fencing = Some(gb.fencing_token());
        let a_end = std::time::Instant::now();
        let _ = ga.release().await; // A may learn it lost the lock; its interval ends anyway
        let b_end = std::time::Instant::now();
        let _ = gb.release().await;
        outcome.intervals.push(interval("A", a_start, a_end));
        outcome.intervals.push(interval("B", b_start, b_end));
    } else {
        let a_end = std::time::Instant::now();
        // A's connection to node 1 broke with the restart, so this may report an error; it
        // deletes A's key on node 0 at least, which frees a majority (nodes 0 and 2) for B.
        let _ = ga.release().await;
        outcome.intervals.push(interval("A", a_start, a_end));
        let gb = b
            .acquire("res:restart", &opts.clone().wait(Duration::from_secs(5)))
            .await
            .expect("B after A's release");
        let b_start = std::time::Instant::now();
        outcome.b_fencing = Some(gb.fencing_token());
        gb.release().await.expect("B's release");
        outcome
            .intervals
            .push(interval("B", b_start, std::time::Instant::now()));
    }
    outcome
}

/// Negative: one of A's majority restarts without persistence and forgets A's key; B wins a
/// majority that includes it. Two holders at once, and the checker sees it. The fencing token
/// does not grow either (node 1's counter restarted). This is what Redlock's assumption
/// "restarted nodes keep their data, or stay down for a TTL" excludes.
#[tokio::test]
async fn restart_without_persistence_gives_two_holders() {
    let outcome = restart_scenario(&[]).await;
    assert!(
        outcome.b_acquired_while_a_held,
        "B must win nodes 1 and 2 while A holds"
    );
    assert_eq!(
        overlaps(&outcome.intervals),
        vec![("A".to_owned(), "B".to_owned())],
        "the overlap checker must report two holders"
    );
    let b_fencing = outcome.b_fencing.expect("B acquired");
    assert!(
        b_fencing <= outcome.a_fencing,
        "B's fencing token {b_fencing} should not exceed A's {} here: the counter restarted",
        outcome.a_fencing
    );
}

/// The twin with `appendfsync always`: node 1 comes back with A's key, B gets only node 2, and
/// nobody overlaps; after A's release B acquires with a larger fencing token.
#[tokio::test]
async fn restart_with_appendfsync_always_keeps_one_holder() {
    let outcome = restart_scenario(&["--appendonly", "yes", "--appendfsync", "always"]).await;
    assert!(!outcome.b_acquired_while_a_held);
    assert_eq!(overlaps(&outcome.intervals), Vec::<(String, String)>::new());
    let b_fencing = outcome.b_fencing.expect("B acquired after A");
    assert!(
        b_fencing > outcome.a_fencing,
        "{b_fencing} > {}",
        outcome.a_fencing
    );
}

// ---- wait budget -----------------------------------------------------------------------------

/// A silent node cannot stretch the wait budget: 5 nodes, one blackholed, a long node timeout
/// (1 s), the key held by another holder on three of the live nodes. An acquire with a 300 ms
/// budget returns `Contended` close to 300 ms, not after the silent node's timeout; the losing
/// rounds' cleanup of the silent node goes on in the background.
#[tokio::test]
async fn contended_redlock_honours_the_wait_budget_with_a_silent_node() {
    let Cluster {
        proxies,
        mut raw,
        managers,
        _servers,
    } = cluster(1, Duration::from_secs(1)).await;
    let key = "budget:1";
    for con in &mut raw[1..4] {
        set_px(con, &full(key), "other-holder", 20_000).await;
    }
    proxies[4].set_blackhole(true);
    let opts = LockOptions::new(Duration::from_secs(10)).wait(Duration::from_millis(300));
    let started = Instant::now();
    let err = managers[0]
        .acquire(key, &opts)
        .await
        .expect_err("three of five nodes are held by another holder");
    let elapsed = started.elapsed();
    assert!(err.is_contended(), "{err:?}");
    assert!(
        elapsed < Duration::from_millis(300) + SLACK,
        "a 300 ms budget took {elapsed:?}"
    );
}

// ---- a release that a slow node confirms late ---------------------------------------------------

/// Three nodes, node timeout 50 ms, and a 5 s lease won on A and B (C holds a foreign value,
/// which is deleted afterwards). With its manager and the raw connections.
async fn won_on_a_and_b() -> (LockManager, lockcore::LockGuard, Cluster3) {
    let servers = start_servers(3, &[]);
    let proxies = proxies_for(&servers).await;
    let mut raw = connections(&servers).await;
    let manager = redlock(&urls_of(&proxies), Duration::from_millis(50)).await;
    warm_up(&manager, &mut raw).await;
    let key = full("slow-release");
    set_px(&mut raw[2], &key, "foreign-holder", 60_000).await;
    let guard = manager
        .try_acquire("slow-release", &once(Duration::from_secs(5)))
        .await
        .expect("two of three nodes answer")
        .expect("A and B are free");
    assert_eq!(holding(&mut raw, &key, guard.stored_value()).await, 2);
    del(&mut raw[2], &key).await;
    let nodes = Cluster3 {
        raw,
        key,
        proxies,
        _servers: servers,
    };
    (manager, guard, nodes)
}

/// [`won_on_a_and_b`], then A's replies come 300 ms late. Returns the release's result, and the
/// nodes once A has answered.
async fn release_with_a_slow_node(foreign_on_b_too: bool) -> (Result<(), LockError>, Cluster3) {
    let (_manager, guard, mut nodes) = won_on_a_and_b().await;
    let (raw, key, proxies) = (&mut nodes.raw, &nodes.key, &nodes.proxies);
    if foreign_on_b_too {
        // The twin: B now holds another holder's value, so a quorum (B and C) answers that the
        // key is not this guard's.
        set_px(&mut raw[1], key, "next-holder", 60_000).await;
    }
    proxies[0].set_latency(Direction::Replies, Duration::from_millis(300));
    let released = guard.release().await;
    proxies[0].set_latency(Direction::Replies, Duration::ZERO);
    settle_all(proxies).await;
    (released, nodes)
}

struct Cluster3 {
    raw: Vec<MultiplexedConnection>,
    key: String,
    proxies: Vec<FaultProxy>,
    _servers: Vec<RedisServer>,
}

/// The release deleted the key on B at once and on A late, within the TTL: nobody else can
/// have held it, so it is not `Lost` but `ReleaseUnconfirmed`; the key is gone from every node
/// once A has answered.
#[tokio::test]
async fn a_release_confirmed_late_by_a_slow_node_is_not_lost() {
    let (released, mut nodes) = release_with_a_slow_node(false).await;
    assert!(
        !matches!(&released, Err(e) if e.is_lost()),
        "the key was this guard's on a quorum until the release: {released:?}"
    );
    assert!(
        matches!(
            &released,
            Err(LockError::ReleaseUnconfirmed { key, confirmed: 1, needed: 2 }) if *key == nodes.key
        ),
        "B confirmed in time, A late: {released:?}"
    );
    for (i, con) in nodes.raw.iter_mut().enumerate() {
        assert_gone_within(con, &nodes.key, Duration::from_secs(1)).await;
        assert_eq!(get(con, &nodes.key).await, None, "node {i}");
    }
}

/// The twin: a quorum (B and C) answers that the key is not this guard's: `Lost`, and the other
/// holder's value on B is left alone.
#[tokio::test]
async fn a_release_that_a_quorum_refuses_is_lost() {
    let (released, mut nodes) = release_with_a_slow_node(true).await;
    assert!(
        matches!(&released, Err(LockError::Lost { key }) if *key == nodes.key),
        "{released:?}"
    );
    assert_eq!(
        get(&mut nodes.raw[1], &nodes.key).await.as_deref(),
        Some("next-holder")
    );
}

/// A release that never reached A (blackholed) is not confirmed; once A is reachable again the
/// background retry deletes the key there, long before its 5 s TTL.
#[tokio::test]
async fn an_unconfirmed_release_reaches_the_late_node_in_the_background() {
    let (_manager, guard, mut nodes) = won_on_a_and_b().await;
    let token = guard.stored_value().to_owned();
    nodes.proxies[0].set_blackhole(true);
    let released = guard.release().await;
    assert!(
        matches!(
            &released,
            Err(LockError::ReleaseUnconfirmed {
                confirmed: 1,
                needed: 2,
                ..
            })
        ),
        "{released:?}"
    );
    assert_eq!(
        get(&mut nodes.raw[0], &nodes.key).await.as_deref(),
        Some(token.as_str()),
        "the release has not reached A yet"
    );
    nodes.proxies[0].set_blackhole(false);
    assert_gone_within(&mut nodes.raw[0], &nodes.key, Duration::from_secs(3)).await;
}
