//! One paused cluster shard costs the watchdog nothing on the healthy shards: a lease's renewal
//! depends only on its own shard.
//!
//! A real Redis Cluster (3 primaries + 3 replicas, started by the harness), two watchdog leases
//! on keys owned by different primaries, then `CLIENT PAUSE 4000 ALL` on the second primary.
//! The pause holds back that node's clients only: the cluster bus keeps answering, so no
//! replica takes over (each test checks that after the pause). The healthy shard's lease stays
//! held and renewed through the pause; the paused shard's lease is lost at its deadline (the
//! twin: without a renewal a lease ends).
//!
//! One cluster per test: they take about two seconds to start.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use futures_util::FutureExt as _;
use lockcore::{LockError, LockGuard, LockManager, LockOptions, distributed_lock};
use lockcore_tests::{ClusterNode, RedisCluster, full, pause_all_clients, pttl, query};
use redis::aio::MultiplexedConnection;
use tokio::sync::{oneshot, watch};
use tokio::time::{Instant, sleep, sleep_until, timeout_at};

/// The lease TTL of every test: renewed about every 333 ms, valid for about 988 ms.
const TTL: Duration = Duration::from_millis(1_000);

/// How long the second primary holds back its clients.
const PAUSE: Duration = Duration::from_millis(4_000);

/// How far into the pause the tests observe (the rest is margin for the pause's own start).
const OBSERVED: Duration = Duration::from_millis(3_600);

/// The paused shard's lease is lost by its deadline: one TTL after its last renewal, plus slack.
const LOSS_BUDGET: Duration = Duration::from_millis(2_000);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Two user keys whose lock keys live on different primaries: `(healthy, paused)` with their
/// primaries. Bounded: 64 candidates over 3 primaries always cover two.
fn keys_on_two_primaries(cluster: &RedisCluster, stem: &str) -> [(String, ClusterNode); 2] {
    let first = format!("{stem}:0");
    let first_owner = cluster.primary_for_key(&full(&first));
    for i in 1..64 {
        let key = format!("{stem}:{i}");
        let owner = cluster.primary_for_key(&full(&key));
        if owner.id() != first_owner.id() {
            return [(first, first_owner), (key, owner)];
        }
    }
    panic!("64 keys of `{stem}:N` all live on primary {}", first_owner.port())
}

/// A plain connection to one node (not through the cluster client), for probes and the pause.
async fn node_connection(node: &ClusterNode) -> MultiplexedConnection {
    redis::Client::open(node.url())
        .unwrap_or_else(|e| panic!("client for {}: {e}", node.url()))
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("connect to {}: {e}", node.url()))
}

async fn hold(locks: &LockManager, key: &str) -> LockGuard {
    let opts = LockOptions::new(TTL).wait(Duration::ZERO).watchdog(true);
    match locks.try_acquire(key, &opts).await {
        Ok(Some(guard)) => guard,
        Ok(None) => panic!("{key:?} is unexpectedly held"),
        Err(e) => panic!("try_acquire {key:?}: {e:?}"),
    }
}

/// Pauses `node`'s clients for [`PAUSE`]; returns when the pause is in force.
async fn pause(node: &ClusterNode) -> Instant {
    let mut con = node_connection(node).await;
    pause_all_clients(&mut con, u64::try_from(PAUSE.as_millis()).unwrap_or(u64::MAX)).await;
    Instant::now()
}

/// Waits (bounded) until the paused node answers again, then checks the premise: it still
/// serves `key`'s slot, so the pause caused no fail-over.
async fn pause_ended_without_failover(cluster: &RedisCluster, paused: &ClusterNode, key: &str) {
    let mut con = node_connection(paused).await;
    let ping = redis::cmd("PING");
    let answered = tokio::time::timeout(PAUSE * 2, query::<String>(&mut con, &ping)).await;
    assert!(
        answered.is_ok(),
        "the paused primary {} did not answer within {:?}",
        paused.port(),
        PAUSE * 2
    );
    let owner = cluster.primary_for_key(&full(key));
    assert_eq!(
        owner.id(),
        paused.id(),
        "premise: the pause must not fail over {} (cluster-node-timeout {:?})",
        paused.port(),
        lockcore_tests::NODE_TIMEOUT
    );
}

/// The healthy shard's lease through the pause: held, `lost()` pending, its key's PTTL renewed
/// in Redis. The paused shard's lease is lost at its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_shard_costs_no_lease_on_a_healthy_shard() {
    let cluster = RedisCluster::start();
    let locks = lockcore_tests::cluster_manager(&cluster).await;
    let [(healthy_key, healthy_node), (paused_key, paused_node)] =
        keys_on_two_primaries(&cluster, "shard");
    let healthy = hold(&locks, &healthy_key).await;
    let paused = hold(&locks, &paused_key).await;
    let mut probe = node_connection(&healthy_node).await;

    let paused_at = pause(&paused_node).await;
    let mut first_miss: Option<String> = None;
    let mut renewals = 0u32;
    let mut min_pttl = i64::MAX;
    let mut last_pttl = pttl(&mut probe, healthy.key()).await;
    let mut paused_lost_after: Option<Duration> = None;
    // Bounded: one probe every 25 ms over the observed part of the pause.
    for _ in 0..(OBSERVED.as_millis() / 25) {
        if paused_at.elapsed() >= OBSERVED {
            break;
        }
        sleep(ms(25)).await;
        let at = paused_at.elapsed();
        let now_pttl = pttl(&mut probe, healthy.key()).await;
        if now_pttl > last_pttl + 100 {
            renewals += 1;
        }
        min_pttl = min_pttl.min(now_pttl);
        last_pttl = now_pttl;
        let lost = healthy.lost().now_or_never().is_some();
        if first_miss.is_none() && (!healthy.is_held() || lost || now_pttl <= 0) {
            first_miss = Some(format!(
                "{at:?} into the pause: is_held() {}, lost() completed {lost}, PTTL {now_pttl}",
                healthy.is_held()
            ));
        }
        if paused_lost_after.is_none() && paused.lost().now_or_never().is_some() {
            paused_lost_after = Some(at);
        }
    }
    eprintln!(
        "healthy {healthy_key} on {}: {renewals} renewals seen, min PTTL {min_pttl} ms, first \
         miss {first_miss:?}; paused {paused_key} on {}: lost after {paused_lost_after:?}",
        healthy_node.port(),
        paused_node.port()
    );
    pause_ended_without_failover(&cluster, &paused_node, &paused_key).await;

    assert_eq!(
        first_miss, None,
        "the lease on the healthy shard must stay held through a pause of another shard"
    );
    // About one renewal every 333 ms over 3.6 s: eleven; five leaves room for a loaded machine.
    assert!(
        renewals >= 5,
        "the healthy key's PTTL was renewed only {renewals} times in {OBSERVED:?}"
    );
    // The twin: the paused shard's lease cannot be renewed, and ends at its deadline.
    let Some(lost_after) = paused_lost_after else {
        panic!("the lease on the paused shard was not reported lost during the pause")
    };
    assert!(
        lost_after <= LOSS_BUDGET,
        "the paused shard's lease was reported lost only {lost_after:?} into the pause"
    );
    assert!(!paused.is_held());

    let released = healthy.release().await;
    assert!(released.is_ok(), "release of the healthy lease: {released:?}");
    let released = paused.release().await;
    assert!(
        matches!(released, Err(LockError::Lost { .. }) | Ok(())),
        "release of the lost lease: {released:?}"
    );
    assert_eq!(locks.live_renewals(), 0);
}

/// What the wrapped body reports: its ticks (one per 20 ms) until `done` flips.
#[distributed_lock(
    key = "<key>",
    ttl_ms = 1000,
    wait_ms = 0,
    manager = locks,
    on_lost = "abort"
)]
async fn hold_until_done(
    locks: LockManager,
    key: String,
    started: oneshot::Sender<()>,
    mut done: watch::Receiver<bool>,
    ticks: Arc<AtomicU32>,
) -> Result<u32, LockError> {
    let _ = started.send(());
    // Bounded: 500 ticks of 20 ms (10 s) at most.
    for _ in 0..500 {
        if *done.borrow_and_update() {
            break;
        }
        tokio::select! {
            _ = done.changed() => {}
            () = sleep(ms(20)) => {}
        }
        ticks.fetch_add(1, Ordering::SeqCst);
    }
    Ok(ticks.load(Ordering::SeqCst))
}

/// Under `#[distributed_lock(on_lost = "abort")]` (watchdog on), a body whose key is validly
/// held on a healthy shard is not aborted while another shard is paused. The twin, the same
/// body on the paused shard, is aborted with `Err(Lost)`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_lost_abort_spares_a_body_on_a_healthy_shard() {
    let cluster = RedisCluster::start();
    let locks = lockcore_tests::cluster_manager(&cluster).await;
    let [(healthy_key, healthy_node), (paused_key, paused_node)] =
        keys_on_two_primaries(&cluster, "body");
    let (done_tx, done) = watch::channel(false);
    let healthy_ticks = Arc::new(AtomicU32::new(0));
    let spawn_body = |key: &str, ticks: &Arc<AtomicU32>| {
        let (started, running) = oneshot::channel();
        let call = tokio::spawn(hold_until_done(
            locks.clone(),
            key.to_owned(),
            started,
            done.clone(),
            Arc::clone(ticks),
        ));
        (call, running)
    };
    let (mut paused_call, paused_running) = spawn_body(&paused_key, &Arc::default());
    let (mut healthy_call, healthy_running) = spawn_body(&healthy_key, &healthy_ticks);
    for running in [paused_running, healthy_running] {
        running
            .await
            .unwrap_or_else(|_| panic!("a body did not start (its acquire failed)"));
    }
    let mut probe = node_connection(&healthy_node).await;

    let paused_at = pause(&paused_node).await;
    // The twin: the body on the paused shard is aborted once its lease's deadline passes.
    let paused_result = timeout_at(paused_at + OBSERVED, &mut paused_call).await;
    // The scenario: the healthy body holds on through the observed part of the pause.
    sleep_until(paused_at + OBSERVED).await;
    let healthy_finished_early = healthy_call.is_finished();
    let healthy_pttl = pttl(&mut probe, &full(&healthy_key)).await;
    let _ = done_tx.send(true);
    let healthy_result = tokio::time::timeout(ms(3_000), &mut healthy_call).await;
    eprintln!(
        "paused body: {paused_result:?}; healthy body finished early {healthy_finished_early}, \
         PTTL {healthy_pttl} ms at {OBSERVED:?}, result {healthy_result:?}"
    );
    pause_ended_without_failover(&cluster, &paused_node, &paused_key).await;

    let healthy_result = healthy_result
        .unwrap_or_else(|_| panic!("the healthy body did not finish once told to"))
        .unwrap_or_else(|e| panic!("healthy body task: {e}"));
    assert!(
        !healthy_finished_early && matches!(healthy_result, Ok(n) if n > 100),
        "the body on the healthy shard must run to completion through another shard's pause, \
         got {healthy_result:?} (finished early: {healthy_finished_early})"
    );
    assert!(
        healthy_pttl > 0,
        "the healthy key must be held in Redis through the pause (PTTL {healthy_pttl})"
    );
    let paused_result = paused_result
        .unwrap_or_else(|_| panic!("the body on the paused shard was not aborted by {OBSERVED:?}"))
        .unwrap_or_else(|e| panic!("paused body task: {e}"));
    assert!(
        matches!(paused_result, Err(LockError::Lost { .. })),
        "the body on the paused shard must be aborted with Err(Lost), got {paused_result:?}"
    );
    assert_eq!(locks.live_renewals(), 0);
}
