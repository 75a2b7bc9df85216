//! A hand-over while the lock's slot is half-moved between two primaries of a real Redis
//! Cluster: every key a script touches is declared, so a script whose keys are split between
//! the two nodes fails before it writes (`TRYAGAIN`), and a waiter treats that as a reason to
//! wait, not to fail. Fencing tokens never go back.
//!
//! One cluster per test: they take about two seconds to start.

use std::time::Duration;

use lockcore::{LockError, LockGuard, LockManager, LockOptions};
use lockcore_tests::{RedisCluster, SlotMigration};
use redis::AsyncCommands as _;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep};

const KEY: &str = "migrating:order:7";
const FULL: &str = "lock:migrating:order:7";

async fn raw(cluster: &RedisCluster) -> redis::cluster_async::ClusterConnection {
    redis::cluster::ClusterClient::new(cluster.seed_urls())
        .unwrap_or_else(|e| panic!("cluster client: {e}"))
        .get_async_connection()
        .await
        .unwrap_or_else(|e| panic!("cluster connection: {e}"))
}

fn hold() -> LockOptions {
    LockOptions::new(Duration::from_secs(5)).wait(Duration::ZERO)
}

/// A holder with fencing token 6 (five rounds before it), and a waiter queued behind it.
async fn holder_and_queued_waiter(
    cluster: &RedisCluster,
) -> (LockGuard, JoinHandle<Result<LockGuard, LockError>>) {
    let holder = lockcore_tests::cluster_manager(cluster).await;
    for _ in 0..5 {
        lockcore_tests::acquire_and_release(&holder, KEY, &hold(), "a warm-up round").await;
    }
    let guard = lockcore_tests::must_acquire(&holder, KEY, &hold()).await;
    assert_eq!(guard.fencing_token(), 6, "five rounds before the holder");
    let waiter: LockManager = lockcore_tests::cluster_manager(cluster).await;
    let waiting = tokio::spawn(async move {
        waiter
            .acquire(
                KEY,
                &LockOptions::new(Duration::from_secs(5)).wait(Duration::from_secs(20)),
            )
            .await
    });
    let mut con = raw(cluster).await;
    let started = Instant::now();
    loop {
        let queue = slot_keys(cluster)
            .await
            .into_iter()
            .find(|k| k.contains("__waitq__"));
        if let Some(queue) = queue {
            let len: usize = con.llen(&queue).await.unwrap_or_else(|e| panic!("{e}"));
            if len == 1 {
                break;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the waiter never queued"
        );
        sleep(Duration::from_millis(5)).await;
    }
    (guard, waiting)
}

/// Every key of the lock's slot, on its current primary.
async fn slot_keys(cluster: &RedisCluster) -> Vec<String> {
    let slot = RedisCluster::slot_for_key(FULL);
    let owner = cluster.primary_for_slot(slot);
    let client = redis::Client::open(owner.url()).unwrap_or_else(|e| panic!("{e}"));
    let mut con = client
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    redis::cmd("CLUSTER")
        .arg("GETKEYSINSLOT")
        .arg(slot)
        .arg(1000)
        .query_async(&mut con)
        .await
        .unwrap_or_else(|e| panic!("GETKEYSINSLOT: {e}"))
}

async fn begin_migration(cluster: &RedisCluster) -> SlotMigration {
    let slot = RedisCluster::slot_for_key(FULL);
    let owner = cluster.primary_for_slot(slot);
    let target = cluster
        .nodes()
        .into_iter()
        .find(|n| n.is_primary() && n.id() != owner.id())
        .unwrap_or_else(|| panic!("another primary"));
    cluster
        .begin_slot_migration(slot, &target)
        .await
        .unwrap_or_else(|| panic!("the target already owns the slot"))
}

fn is_counter(key: &str) -> bool {
    key.contains("__fencing_counter__")
}

/// The waiter's outcome once the migration has finished: it must get the lock, with a fencing
/// token above the holder's.
async fn assert_waiter_gets_a_larger_token(
    waiting: JoinHandle<Result<LockGuard, LockError>>,
    released: &Result<(), LockError>,
) {
    let handed = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .unwrap_or_else(|_| panic!("the waiter never finished"))
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|e| {
            panic!("the waiter must get the lock after the migration, got {e:?} (release: {released:?})")
        });
    assert!(
        handed.fencing_token() > 6,
        "fencing went backwards: the next holder got token {} after token 6 (release: {released:?})",
        handed.fencing_token()
    );
    assert!(handed.release().await.is_ok());
}

/// The lock key, the queue and the waiter's entry have moved, the fencing counter has not;
/// then the holder releases. The hand-over must not mint a token from a fresh counter on the
/// target.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_over_during_a_migration_never_mints_a_smaller_token() {
    let cluster = RedisCluster::start();
    let (guard, waiting) = holder_and_queued_waiter(&cluster).await;
    let migration = begin_migration(&cluster).await;
    let moved = migration
        .move_keys_where(&cluster, |key| !is_counter(key))
        .await;
    assert!(
        moved.iter().any(|k| k == FULL),
        "the lock key moved: {moved:?}"
    );
    let released = guard.release().await;
    migration.move_keys(&cluster).await;
    migration.finish(&cluster).await;
    assert_waiter_gets_a_larger_token(waiting, &released).await;
}

/// Only the fencing counter has moved; then the holder releases. A release that fails must
/// leave the queue as it was, and the waiter keeps waiting through `TRYAGAIN` until the
/// migration has finished, then gets the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_fails_during_a_migration_keeps_the_waiter() {
    let cluster = RedisCluster::start();
    let (guard, waiting) = holder_and_queued_waiter(&cluster).await;
    let migration = begin_migration(&cluster).await;
    let moved = migration.move_keys_where(&cluster, is_counter).await;
    assert_eq!(moved.len(), 1, "one counter moved: {moved:?}");
    let queue_before: Vec<String> = migration
        .keys_left(&cluster)
        .await
        .into_iter()
        .filter(|k| k.contains("__waitq__"))
        .collect();
    let released = guard.release().await;
    if released.is_err() {
        let queue_after: Vec<String> = migration
            .keys_left(&cluster)
            .await
            .into_iter()
            .filter(|k| k.contains("__waitq__"))
            .collect();
        assert_eq!(
            queue_after, queue_before,
            "a failed release must leave the queue as it was ({released:?})"
        );
    }
    // The waiter re-checks (and gets TRYAGAIN or ASK) for a while before the slot settles.
    sleep(Duration::from_millis(800)).await;
    assert!(
        !waiting.is_finished(),
        "the waiter gave up during the migration"
    );
    migration.move_keys(&cluster).await;
    migration.finish(&cluster).await;
    assert_waiter_gets_a_larger_token(waiting, &released).await;
}
