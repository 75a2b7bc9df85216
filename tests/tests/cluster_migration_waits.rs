//! A slot migration costs latency, not errors or a waiter's place. While a lock's slot is
//! `MIGRATING` and none of its keys has moved yet, Redis refuses a script that declares a key
//! the source does not have (`TRYAGAIN`): the share set of a plain lock, an empty waiter queue.
//! Release and extend must still succeed then, and a waiter queued before the migration keeps
//! its turn through it (its re-checks keep its entry alive), whether the migration finishes or
//! is aborted. The twins run the same steps on a stable slot.
//!
//! One cluster per test: they take about two seconds to start.

use std::time::Duration;

use lockcore::{LockError, LockGuard, LockManager, LockOptions, keyspace};
use lockcore_tests::{RedisCluster, SlotMigration, pttl, query};
use redis::aio::MultiplexedConnection;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep};

const KEY: &str = "resharded:order:9";
const FULL: &str = "lock:resharded:order:9";
/// How long the slot stays `MIGRATING` with a queue: several entry leases (0.6 s plus two
/// round trips), so that a waiter that cannot refresh its entry is presumed dead.
const MIGRATION: Duration = Duration::from_millis(2_500);

/// How a test's migration ends, or `Stable`: no migration (the twin).
#[derive(Debug, Clone, Copy)]
enum Slot {
    Stable,
    Finished,
    Aborted,
}

/// A connection to the primary that serves the lock's slot now (the source, during a move).
async fn owner(cluster: &RedisCluster) -> MultiplexedConnection {
    let owner = cluster.primary_for_slot(RedisCluster::slot_for_key(FULL));
    redis::Client::open(owner.url())
        .unwrap_or_else(|e| panic!("{e}"))
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("owner connection: {e}"))
}

/// Marks the lock's slot `MIGRATING` on its owner and `IMPORTING` on another primary; no key
/// moves.
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

async fn end(migration: Option<SlotMigration>, how: Slot, cluster: &RedisCluster) {
    match (migration, how) {
        (Some(migration), Slot::Finished) => {
            migration.move_keys(cluster).await;
            migration.finish(cluster).await;
        }
        (Some(migration), _) => migration.abort(cluster).await,
        (None, _) => {}
    }
}

async fn start(how: Slot, cluster: &RedisCluster) -> Option<SlotMigration> {
    match how {
        Slot::Stable => None,
        Slot::Finished | Slot::Aborted => Some(begin_migration(cluster).await),
    }
}

fn once(ttl: Duration) -> LockOptions {
    LockOptions::new(ttl).wait(Duration::ZERO)
}

// ---- release and extend -----------------------------------------------------------------------

async fn release_and_extend(how: Slot) {
    let cluster = RedisCluster::start();
    let manager = lockcore_tests::cluster_manager(&cluster).await;
    let mut guard =
        lockcore_tests::must_acquire(&manager, KEY, &once(Duration::from_secs(10))).await;
    let mut con = owner(&cluster).await;
    let migration = start(how, &cluster).await;
    guard
        .extend(Duration::from_secs(30))
        .await
        .unwrap_or_else(|e| panic!("{how:?}: extend: {e:?}"));
    let left = pttl(&mut con, FULL).await;
    assert!(
        left > 20_000,
        "{how:?}: the extend set the TTL: PTTL {left}"
    );
    let released = guard.release().await;
    assert!(
        released.is_ok(),
        "{how:?}: release of a lock whose slot is MIGRATING (no key moved): {released:?}"
    );
    // `GETKEYSINSLOT`: an `EXISTS` of a missing key in a MIGRATING slot answers `ASK`.
    let left: Vec<String> = query(
        &mut con,
        redis::cmd("CLUSTER")
            .arg("GETKEYSINSLOT")
            .arg(RedisCluster::slot_for_key(FULL))
            .arg(100),
    )
    .await;
    assert!(
        !left.iter().any(|k| k == FULL),
        "{how:?}: the key is gone: {left:?}"
    );
    end(migration, how, &cluster).await;
    let again = lockcore_tests::must_acquire(&manager, KEY, &once(Duration::from_secs(10))).await;
    assert!(
        again.release().await.is_ok(),
        "{how:?}: the slot works after"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_and_extend_succeed_while_the_slot_is_migrating() {
    release_and_extend(Slot::Aborted).await;
}

/// The twin: the same steps on a stable slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_and_extend_succeed_on_a_stable_slot() {
    release_and_extend(Slot::Stable).await;
}

// ---- a waiter's turn --------------------------------------------------------------------------

/// A waiter's acquire on its own manager, waiting up to 30 s.
async fn waiter(cluster: &RedisCluster) -> JoinHandle<Result<LockGuard, LockError>> {
    let manager: LockManager = lockcore_tests::cluster_manager(cluster).await;
    tokio::spawn(async move {
        manager
            .acquire(
                KEY,
                &LockOptions::new(Duration::from_secs(10)).wait(Duration::from_secs(30)),
            )
            .await
    })
}

/// Polls (every 5 ms, at most 10 s) until the waiter queue holds `n` waiters.
async fn queued(con: &mut MultiplexedConnection, n: usize) {
    let (queue, _) = keyspace::waiter_queue_keys("lock:", FULL);
    let started = Instant::now();
    loop {
        let len: usize = query(con, redis::cmd("LLEN").arg(&queue)).await;
        if len == n {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{len} waiters queued, expected {n}"
        );
        sleep(Duration::from_millis(5)).await;
    }
}

/// The queued waiters' entry deadlines, and the server's time, in ms.
async fn entries(con: &mut MultiplexedConnection) -> (Vec<u64>, u64) {
    let (_, entries) = keyspace::waiter_queue_keys("lock:", FULL);
    let all: Vec<String> = query(con, redis::cmd("HVALS").arg(&entries)).await;
    let (secs, micros): (u64, u64) = query(con, &redis::cmd("TIME")).await;
    let deadlines = all
        .iter()
        .map(|entry| keyspace::entry_deadline_ms(entry).unwrap_or(0))
        .collect();
    (deadlines, secs * 1_000 + micros / 1_000)
}

/// A holder, a first waiter queued before the migration starts, a second one queued while it
/// runs; the migration lasts several entry leases and then ends `how`, and the holder releases.
/// Both entries are still live at the end of the migration, and the first waiter is served
/// first.
async fn first_waiter_keeps_its_turn(how: Slot) {
    let cluster = RedisCluster::start();
    let holder = lockcore_tests::cluster_manager(&cluster).await;
    let guard = lockcore_tests::must_acquire(&holder, KEY, &once(Duration::from_secs(30))).await;
    let mut con = owner(&cluster).await;
    let first = waiter(&cluster).await;
    queued(&mut con, 1).await;
    let migration = start(how, &cluster).await;
    let second = waiter(&cluster).await;
    queued(&mut con, 2).await;
    // The migration's length is the scenario, not a synchronisation.
    sleep(MIGRATION).await;
    let (deadlines, now) = entries(&mut con).await;
    assert!(
        deadlines.len() == 2 && deadlines.iter().all(|&d| d > now),
        "{how:?}: {MIGRATION:?} into the migration, the queued waiters' entries lapsed (deadlines {deadlines:?}, server time {now}): their re-checks could not refresh them"
    );
    end(migration, how, &cluster).await;
    guard
        .release()
        .await
        .unwrap_or_else(|e| panic!("{how:?}: the holder's release: {e:?}"));
    let first = tokio::time::timeout(Duration::from_secs(10), first)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "{how:?}: the first waiter was not served (the second: finished {})",
                second.is_finished()
            )
        })
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|e| panic!("{how:?}: the first waiter: {e:?}"));
    assert!(
        !second.is_finished(),
        "{how:?}: the second waiter finished while the first holds the lock"
    );
    let first_token = first.fencing_token();
    first
        .release()
        .await
        .unwrap_or_else(|e| panic!("{how:?}: the first waiter's release: {e:?}"));
    let second = tokio::time::timeout(Duration::from_secs(10), second)
        .await
        .unwrap_or_else(|_| panic!("{how:?}: the second waiter was not served"))
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|e| panic!("{how:?}: the second waiter: {e:?}"));
    assert!(
        second.fencing_token() > first_token,
        "{how:?}: served out of turn: the second waiter's token {} is not above the first's {first_token}",
        second.fencing_token()
    );
    assert!(second.release().await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_keeps_its_turn_across_a_finished_migration() {
    first_waiter_keeps_its_turn(Slot::Finished).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_keeps_its_turn_across_an_aborted_migration() {
    first_waiter_keeps_its_turn(Slot::Aborted).await;
}

/// The twin: the same steps on a stable slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_keeps_its_turn_on_a_stable_slot() {
    first_waiter_keeps_its_turn(Slot::Stable).await;
}
