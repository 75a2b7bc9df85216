//! One paused cluster shard costs nothing on the healthy shards: a lease's renewal, and any
//! script call, depends only on its own shard.
//!
//! A real Redis Cluster (3 primaries + 3 replicas, started by the harness), watchdog leases on
//! keys owned by two different primaries, then `CLIENT PAUSE 4000 ALL` on the second primary.
//! The pause holds back that node's clients only: the cluster bus keeps answering, so no
//! replica takes over (each test checks that after the pause). The healthy shard's lease stays
//! held and renewed through the pause; the paused shard's 1 s lease is lost at its deadline
//! (the twin: without a renewal a lease ends), while a 10 s lease on the paused shard keeps a
//! renewal waiting on that shard all through the pause and is renewed once the pause ends.
//!
//! One cluster per test: they take about two seconds to start.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use futures_util::FutureExt as _;
use lockcore::{LockError, LockGuard, LockManager, LockOptions, distributed_lock};
use lockcore_tests::{ClusterNode, RedisCluster, full, pause_all_clients, pttl, script_flush};
use redis::aio::MultiplexedConnection;
use tokio::sync::{oneshot, watch};
use tokio::time::{Instant, sleep, sleep_until, timeout_at};

/// The TTL of the leases that must survive (healthy shard) or be lost (paused shard): renewed
/// about every 333 ms, valid for about 988 ms.
const TTL: Duration = Duration::from_millis(1_000);

/// A TTL that outlasts the pause: its lease on the paused shard is retried (each attempt
/// waiting for the cluster client's timeout) all through the pause.
const LONG_TTL: Duration = Duration::from_millis(10_000);

/// How long the second primary holds back its clients.
const PAUSE: Duration = Duration::from_millis(4_000);

/// How far into the pause the tests observe (the rest is margin for the pause's own start).
const OBSERVED: Duration = Duration::from_millis(3_600);

/// The paused shard's lease is lost by its deadline: one TTL after its last renewal, plus slack.
const LOSS_BUDGET: Duration = Duration::from_millis(2_000);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The keys of one test: one on a healthy primary, two on the primary that is paused.
struct Keys {
    healthy: String,
    healthy_node: ClusterNode,
    paused: String,
    paused_long: String,
    paused_node: ClusterNode,
}

/// User keys `stem:N` whose lock keys live on two different primaries. Bounded: 256
/// candidates over 3 primaries.
fn keys_on_two_primaries(cluster: &RedisCluster, stem: &str) -> Keys {
    let candidates: Vec<(String, ClusterNode)> = (0..256)
        .map(|i| {
            let key = format!("{stem}:{i}");
            let owner = cluster.primary_for_key(&full(&key));
            (key, owner)
        })
        .collect();
    let (healthy, healthy_node) = candidates[0].clone();
    let mut on_other = candidates
        .iter()
        .filter(|(_, owner)| owner.id() != healthy_node.id());
    let (Some((paused, paused_node)), Some(long)) = (on_other.next(), on_other.next()) else {
        panic!("256 keys of `{stem}:N` do not cover two primaries")
    };
    let Some((paused_long, _)) = std::iter::once(long)
        .chain(on_other)
        .find(|(_, owner)| owner.id() == paused_node.id())
    else {
        panic!(
            "no second key of `{stem}:N` on primary {}",
            paused_node.port()
        )
    };
    Keys {
        healthy,
        healthy_node,
        paused: paused.clone(),
        paused_long: paused_long.clone(),
        paused_node: paused_node.clone(),
    }
}

/// A plain connection to one node (not through the cluster client), for probes and the pause.
async fn node_connection(node: &ClusterNode) -> MultiplexedConnection {
    redis::Client::open(node.url())
        .unwrap_or_else(|e| panic!("client for {}: {e}", node.url()))
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("connect to {}: {e}", node.url()))
}

async fn hold(locks: &LockManager, key: &str, ttl: Duration) -> LockGuard {
    let opts = LockOptions::new(ttl).wait(Duration::ZERO).watchdog(true);
    match locks.try_acquire(key, &opts).await {
        Ok(Some(guard)) => guard,
        Ok(None) => panic!("{key:?} is unexpectedly held"),
        Err(e) => panic!("try_acquire {key:?}: {e:?}"),
    }
}

/// Pauses `node`'s clients for [`PAUSE`]; returns when the pause is in force.
async fn pause(node: &ClusterNode) -> Instant {
    let mut con = node_connection(node).await;
    pause_all_clients(
        &mut con,
        u64::try_from(PAUSE.as_millis()).unwrap_or(u64::MAX),
    )
    .await;
    Instant::now()
}

/// Waits (bounded) until the paused node answers again, then checks the premise: it still
/// serves `key`'s slot, so the pause caused no fail-over.
async fn pause_ended_without_failover(cluster: &RedisCluster, paused: &ClusterNode, key: &str) {
    let client = redis::Client::open(paused.url())
        .unwrap_or_else(|e| panic!("client for {}: {e}", paused.url()));
    let give_up_at = Instant::now() + PAUSE * 2;
    let mut last = None;
    // Bounded: at most 100 attempts, each of at most 500 ms, within twice the pause.
    for _ in 0..100 {
        let attempt = tokio::time::timeout(ms(500), async {
            let mut con = client.get_multiplexed_async_connection().await?;
            redis::cmd("PING").query_async::<String>(&mut con).await
        })
        .await;
        match attempt {
            Ok(Ok(_)) => {
                last = None;
                break;
            }
            Ok(Err(e)) => last = Some(e.to_string()),
            Err(_) => last = Some("no reply within 500 ms".to_owned()),
        }
        assert!(
            Instant::now() < give_up_at,
            "the paused primary {} did not answer within {:?}: {last:?}",
            paused.port(),
            PAUSE * 2
        );
        sleep(ms(50)).await;
    }
    assert_eq!(
        last,
        None,
        "the paused primary {} answers again",
        paused.port()
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

/// After the pause: the long lease on the paused shard is still held and its key is renewed to
/// about its full TTL again (polled, bounded by one second).
async fn long_lease_renewed_after_the_pause(guard: &LockGuard, node: &ClusterNode) {
    assert!(guard.is_held(), "the {LONG_TTL:?} lease outlasts the pause");
    let mut con = node_connection(node).await;
    let mut seen = Vec::new();
    // Bounded: 50 probes of 20 ms.
    for _ in 0..50 {
        let left = pttl(&mut con, guard.key()).await;
        seen.push(left);
        if left > 8_000 {
            return;
        }
        sleep(ms(20)).await;
    }
    panic!("the {LONG_TTL:?} lease was not renewed after the pause (PTTL seen {seen:?})");
}

/// The healthy shard's lease through the pause: held, `lost()` pending, its key's PTTL renewed
/// in Redis. The paused shard's 1 s lease is lost at its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_shard_costs_no_lease_on_a_healthy_shard() {
    let cluster = RedisCluster::start();
    let locks = lockcore_tests::cluster_manager(&cluster).await;
    let keys = keys_on_two_primaries(&cluster, "shard");
    let healthy = hold(&locks, &keys.healthy, TTL).await;
    let paused = hold(&locks, &keys.paused, TTL).await;
    let paused_long = hold(&locks, &keys.paused_long, LONG_TTL).await;
    let mut probe = node_connection(&keys.healthy_node).await;

    let paused_at = pause(&keys.paused_node).await;
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
        "healthy {} on {}: {renewals} renewals seen, min PTTL {min_pttl} ms, first miss \
         {first_miss:?}; paused {} on {}: lost after {paused_lost_after:?}",
        keys.healthy,
        keys.healthy_node.port(),
        keys.paused,
        keys.paused_node.port()
    );
    pause_ended_without_failover(&cluster, &keys.paused_node, &keys.paused).await;

    assert_eq!(
        first_miss, None,
        "the lease on the healthy shard must stay held through a pause of another shard"
    );
    // About one renewal every 333 ms over 3.6 s: ten; five leaves room for a loaded machine.
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
    long_lease_renewed_after_the_pause(&paused_long, &keys.paused_node).await;

    for (guard, what) in [(healthy, "healthy"), (paused_long, "long")] {
        let released = guard.release().await;
        assert!(
            released.is_ok(),
            "release of the {what} lease: {released:?}"
        );
    }
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
    let keys = keys_on_two_primaries(&cluster, "body");
    let (done_tx, done) = watch::channel(false);
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
    let paused_long = hold(&locks, &keys.paused_long, LONG_TTL).await;
    let (mut paused_call, paused_running) = spawn_body(&keys.paused, &Arc::default());
    let (mut healthy_call, healthy_running) = spawn_body(&keys.healthy, &Arc::default());
    for running in [paused_running, healthy_running] {
        running
            .await
            .unwrap_or_else(|_| panic!("a body did not start (its acquire failed)"));
    }
    let mut probe = node_connection(&keys.healthy_node).await;

    let paused_at = pause(&keys.paused_node).await;
    // The twin: the body on the paused shard is aborted once its lease's deadline passes.
    let paused_result = timeout_at(paused_at + OBSERVED, &mut paused_call).await;
    // The scenario: the healthy body holds on through the observed part of the pause.
    sleep_until(paused_at + OBSERVED).await;
    let healthy_finished_early = healthy_call.is_finished();
    let healthy_pttl = pttl(&mut probe, &full(&keys.healthy)).await;
    let _ = done_tx.send(true);
    let healthy_result = tokio::time::timeout(ms(3_000), &mut healthy_call).await;
    eprintln!(
        "paused body: {paused_result:?}; healthy body finished early {healthy_finished_early}, \
         PTTL {healthy_pttl} ms at {OBSERVED:?}, result {healthy_result:?}"
    );
    pause_ended_without_failover(&cluster, &keys.paused_node, &keys.paused).await;

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
    long_lease_renewed_after_the_pause(&paused_long, &keys.paused_node).await;
    let released = paused_long.release().await;
    assert!(released.is_ok(), "release of the long lease: {released:?}");
    assert_eq!(locks.live_renewals(), 0);
}

/// A script missing from a healthy primary's cache (`SCRIPT FLUSH`) is loaded on that primary
/// alone while another primary is paused: acquire and release there answer at once. The twin:
/// redis-rs' own `Script::invoke_async` sends its `SCRIPT LOAD` to every node of the cluster
/// and waits for the paused one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_reload_waits_for_no_other_shard() {
    let cluster = RedisCluster::start();
    let locks = lockcore_tests::cluster_manager(&cluster).await;
    let keys = keys_on_two_primaries(&cluster, "reload");
    // The twin's cluster client, connected to every node before the pause, with lockcore's
    // timeouts.
    let client = redis::cluster::ClusterClientBuilder::new(cluster.seed_urls())
        .response_timeout(ms(500))
        .overall_response_timeout(Some(ms(1_000)))
        .retries(3)
        .build()
        .unwrap_or_else(|e| panic!("cluster client: {e}"));
    let mut raw = client
        .get_async_connection()
        .await
        .unwrap_or_else(|e| panic!("cluster connection: {e}"));
    let mut healthy = node_connection(&keys.healthy_node).await;
    script_flush(&mut healthy).await;
    let paused_at = pause(&keys.paused_node).await;

    let opts = LockOptions::new(ms(5_000)).wait(Duration::ZERO);
    let started = Instant::now();
    let acquired = locks.try_acquire(&keys.healthy, &opts).await;
    let acquire_took = started.elapsed();
    let guard = match acquired {
        Ok(Some(guard)) => guard,
        other => {
            panic!("acquire on the healthy shard after SCRIPT FLUSH: {other:?} ({acquire_took:?})")
        }
    };
    let started = Instant::now();
    let released = guard.release().await;
    let release_took = started.elapsed();

    // The twin, within the pause: a script no node has cached.
    let naive = redis::Script::new(lockcore_tests::lua::EXISTS);
    let started = Instant::now();
    let naive_reply: redis::RedisResult<i64> =
        naive.key(full(&keys.healthy)).invoke_async(&mut raw).await;
    let naive_took = started.elapsed();
    let twin_in_pause = paused_at.elapsed() < PAUSE;
    eprintln!(
        "acquire {acquire_took:?}, release {release_took:?} ({released:?}); naive invoke_async \
         {naive_reply:?} in {naive_took:?}"
    );
    pause_ended_without_failover(&cluster, &keys.paused_node, &keys.paused).await;

    assert!(released.is_ok(), "release: {released:?}");
    assert!(
        acquire_took < ms(250) && release_took < ms(250),
        "a script call on the healthy shard must not wait for the paused one: acquire \
         {acquire_took:?}, release {release_took:?}"
    );
    assert!(twin_in_pause, "the twin ran after the pause ended");
    assert!(
        naive_reply.is_err() || naive_took >= ms(400),
        "the naive reload is expected to wait for the paused shard: {naive_reply:?} in {naive_took:?}"
    );
}
