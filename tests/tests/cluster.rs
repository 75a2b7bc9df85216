//! lockcore on a real Redis Cluster (3 primaries + 3 replicas, started by the harness): key
//! shapes, fencing per slot, hand-off, the watchdog across slots, a slot migrated under a held
//! lock, and a fail-over with a holder and a queued waiter.
//!
//! One cluster per test: they take about two seconds to start.

use std::time::Duration;

use lockcore::{FencingCounter, LockError, LockManager, LockOptions};
use lockcore_tests::RedisCluster;
use redis::AsyncCommands as _;
use tokio::time::Instant;

async fn manager(cluster: &RedisCluster) -> LockManager {
    lockcore_tests::cluster_manager(cluster).await
}

async fn raw(cluster: &RedisCluster) -> redis::cluster_async::ClusterConnection {
    redis::cluster::ClusterClient::new(cluster.seed_urls())
        .unwrap_or_else(|e| panic!("cluster client: {e}"))
        .get_async_connection()
        .await
        .unwrap_or_else(|e| panic!("cluster connection: {e}"))
}

fn once(ttl_ms: u64) -> LockOptions {
    LockOptions::new(Duration::from_millis(ttl_ms)).wait(Duration::ZERO)
}

/// Keys of many shapes land in many slots; each is locked, visible on the cluster with its
/// token, excluded for a second contender, and released. Fencing tokens of one key grow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_key_shapes_lock_and_release() {
    let cluster = RedisCluster::start();
    let locks = manager(&cluster).await;
    let other = manager(&cluster).await;
    let mut con = raw(&cluster).await;
    let keys = [
        "order:1",
        "order:2",
        "{user:7}:cart",
        "{user:7}:wallet",
        "caf\u{e9}",
        "a{}b",
        "{}",
        "x}{y",
        "with space",
        "emoji:\u{1f512}",
    ];
    let mut slots = std::collections::BTreeSet::new();
    for key in keys {
        let full = format!("lock:{key}");
        slots.insert(RedisCluster::slot_for_key(&full));
        let guard = locks
            .try_acquire(key, &once(5_000))
            .await
            .unwrap_or_else(|e| panic!("acquire {key:?}: {e}"))
            .unwrap_or_else(|| panic!("{key:?} is free"));
        let stored: Option<String> = con.get(&full).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(stored.as_deref(), Some(guard.stored_value()), "{key:?}");
        let contender = other.try_acquire(key, &once(5_000)).await;
        assert!(
            matches!(contender, Ok(None)),
            "{key:?} is held: {contender:?}"
        );
        let first = guard.fencing_token();
        assert!(guard.release().await.is_ok(), "release {key:?}");
        let again = locks
            .try_acquire(key, &once(5_000))
            .await
            .unwrap_or_else(|e| panic!("re-acquire {key:?}: {e}"))
            .unwrap_or_else(|| panic!("{key:?} was released"));
        assert!(
            again.fencing_token() > first,
            "{key:?}: fencing tokens grow"
        );
        assert!(again.release().await.is_ok());
    }
    assert!(slots.len() >= 5, "the keys cover several slots: {slots:?}");
}

/// The watchdog renews leases in many slots (one script call per slot: a cross-slot batch
/// would fail with CROSSSLOT). Its twin without the watchdog loses every key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_renews_across_slots_twin_without_it_expires() {
    let cluster = RedisCluster::start();
    let locks = manager(&cluster).await;
    let mut con = raw(&cluster).await;
    let ttl = Duration::from_millis(600);
    let mut watched = Vec::new();
    let mut unwatched = Vec::new();
    for i in 0..12 {
        let w = LockOptions::new(ttl).wait(Duration::ZERO).watchdog(true);
        watched.push(
            locks
                .try_acquire(&format!("wd:on:{i}"), &w)
                .await
                .unwrap_or_else(|e| panic!("{e}"))
                .unwrap_or_else(|| panic!("free")),
        );
        unwatched.push(
            locks
                .try_acquire(&format!("wd:off:{i}"), &once(600))
                .await
                .unwrap_or_else(|e| panic!("{e}"))
                .unwrap_or_else(|| panic!("free")),
        );
    }
    tokio::time::sleep(ttl * 3).await;
    for guard in &watched {
        assert!(guard.is_held(), "{} lost", guard.key());
        let stored: Option<String> = con.get(guard.key()).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            stored.as_deref(),
            Some(guard.stored_value()),
            "{}",
            guard.key()
        );
    }
    for guard in &unwatched {
        let stored: Option<String> = con.get(guard.key()).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            stored,
            None,
            "{} must expire without the watchdog",
            guard.key()
        );
    }
    for guard in watched {
        assert!(guard.release().await.is_ok());
    }
    assert_eq!(locks.live_renewals(), 0);
}

/// A contended waiter queues on the cluster and is handed the lock by the release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handoff_wakes_a_queued_waiter() {
    let cluster = RedisCluster::start();
    let holder = manager(&cluster).await;
    let waiter = manager(&cluster).await;
    let guard = holder
        .try_acquire("handoff", &once(10_000))
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("free"));
    let (queued_tx, queued_rx) = tokio::sync::oneshot::channel();
    let waiting = tokio::spawn(async move {
        let _ = queued_tx.send(());
        let opts = LockOptions::new(Duration::from_secs(5)).wait(Duration::from_secs(5));
        waiter.acquire("handoff", &opts).await
    });
    let _ = queued_rx.await;
    let first = guard.fencing_token();
    assert!(guard.release().await.is_ok());
    let handed = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .unwrap_or_else(|_| panic!("the waiter was not handed the lock"))
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|e| panic!("waiter: {e}"));
    assert!(handed.fencing_token() > first);
    assert!(handed.release().await.is_ok());
}

/// A slot migrated to another primary while its lock is held and renewed: the lease survives
/// (MIGRATE keeps the TTL; the client follows ASK and MOVED) and the release still works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slot_migration_under_a_held_lock() {
    let cluster = RedisCluster::start();
    let locks = manager(&cluster).await;
    let key = "migrating";
    let full = format!("lock:{key}");
    let ttl = Duration::from_millis(900);
    let guard = locks
        .try_acquire(
            key,
            &LockOptions::new(ttl).wait(Duration::ZERO).watchdog(true),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("free"));
    let slot = RedisCluster::slot_for_key(&full);
    let owner = cluster.primary_for_slot(slot);
    let target = cluster
        .nodes()
        .into_iter()
        .find(|n| n.is_primary() && n.id() != owner.id())
        .unwrap_or_else(|| panic!("another primary"));
    cluster.migrate_slot(slot, &target).await;
    assert_eq!(cluster.primary_for_slot(slot).id(), target.id());
    tokio::time::sleep(ttl * 2).await;
    assert!(guard.is_held(), "the lease survives the migration");
    let mut con = raw(&cluster).await;
    let stored: Option<String> = con.get(&full).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(stored.as_deref(), Some(guard.stored_value()));
    assert!(guard.release().await.is_ok(), "release after the migration");
    let gone: Option<String> = con.get(&full).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(gone, None);
}

/// `CLUSTER FAILOVER` of the lock's primary with a holder and a queued waiter: every call ends
/// within its budget with a guard or a Redis error (never `Contended` for a free key), and the
/// waiter gets the lock once the holder releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_with_a_holder_and_a_queued_waiter() {
    let cluster = RedisCluster::start();
    let holder = manager(&cluster).await;
    let waiter = manager(&cluster).await;
    let key = "failover";
    let guard = holder
        .try_acquire(
            key,
            &LockOptions::new(Duration::from_secs(3))
                .wait(Duration::ZERO)
                .watchdog(true),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("free"));
    let budget = Duration::from_secs(8);
    let waiting = tokio::spawn(async move {
        let started = Instant::now();
        let opts = LockOptions::new(Duration::from_secs(3)).wait(budget);
        let mut last = None;
        // Bounded: a Redis error during the fail-over is retried at most 20 times.
        for _ in 0..20 {
            match waiter.acquire(key, &opts).await {
                Ok(guard) => return (Ok(guard), started.elapsed()),
                Err(e @ LockError::Redis(_)) => last = Some(e),
                Err(e) => return (Err(e), started.elapsed()),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        (
            Err(last.unwrap_or(LockError::NoDefaultManager)),
            started.elapsed(),
        )
    });
    cluster.failover_primary_of(&format!("lock:{key}")).await;
    let released = guard.release().await;
    assert!(
        released.is_ok(),
        "release after the fail-over: {released:?}"
    );
    let (acquired, took) = tokio::time::timeout(budget * 3, waiting)
        .await
        .unwrap_or_else(|_| panic!("the waiter never finished"))
        .unwrap_or_else(|e| panic!("{e}"));
    let guard = acquired
        .unwrap_or_else(|e| panic!("the waiter must get the lock, got {e:?} after {took:?}"));
    assert!(guard.release().await.is_ok());
}

/// A per-prefix fencing counter cannot share every lock key's slot: refused at build time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_prefix_counter_is_refused_on_a_cluster() {
    let cluster = RedisCluster::start();
    let built = LockManager::builder()
        .cluster(cluster.seed_urls())
        .fencing_counter(FencingCounter::PerPrefix)
        .build()
        .await;
    match built {
        Err(LockError::InvalidOptions { reason }) => {
            assert!(reason.contains("PerSlot"), "{reason}")
        }
        other => panic!("expected InvalidOptions, got {other:?}"),
    }
}

/// `wait_for_replicas` on a cluster: each script call and its `WAIT` go, as one pipeline, to
/// the primary of the key's slot, whose one replica acknowledges; keys in several slots, an
/// extend, and several keys of one slot in one call. Two replicas cannot be had: the acquire
/// fails with `NotReplicated` (one acknowledged) and leaves no key behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_replicas_goes_to_the_slot_primary_with_its_script() {
    let cluster = RedisCluster::start();
    let build = |replicas: usize| {
        LockManager::builder()
            .cluster(cluster.seed_urls())
            .response_timeout(Duration::from_secs(3))
            .wait_for_replicas(replicas, Duration::from_secs(2))
            .build()
    };
    let one = build(1)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", cluster.log()));
    // Every primary's replica online (synced), so that `WAIT` counts it.
    for primary in cluster.nodes().into_iter().filter(|n| n.is_primary()) {
        let client = redis::Client::open(primary.url()).unwrap_or_else(|e| panic!("{e}"));
        let mut con = client
            .get_multiplexed_async_connection()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        lockcore_tests::assert_replica_online_within(&mut con, Duration::from_secs(10)).await;
    }
    let mut slots = std::collections::BTreeSet::new();
    for key in ["order:1", "order:2", "order:3", "{user:7}:cart", "x}{y"] {
        slots.insert(RedisCluster::slot_for_key(&format!("lock:{key}")));
        let mut guard = one
            .try_acquire(key, &once(5_000))
            .await
            .unwrap_or_else(|e| panic!("{key}: the slot's replica acknowledges: {e}"))
            .unwrap_or_else(|| panic!("{key} is free"));
        guard
            .extend(Duration::from_secs(6))
            .await
            .unwrap_or_else(|e| panic!("{key}: extend is acknowledged: {e}"));
        guard.release().await.unwrap_or_else(|e| panic!("{e}"));
    }
    assert!(slots.len() > 1, "the keys span several slots");
    let both = one
        .acquire_many(["{user:7}:a", "{user:7}:b"], &once(5_000))
        .await
        .unwrap_or_else(|e| panic!("one slot, one call: {e}"));
    both.release().await.unwrap_or_else(|e| panic!("{e}"));

    let two = build(2).await.unwrap_or_else(|e| panic!("{e}"));
    match two.try_acquire("order:9", &once(5_000)).await {
        Err(LockError::NotReplicated { acked, needed, .. }) => assert_eq!((acked, needed), (1, 2)),
        other => panic!("expected NotReplicated, got {other:?}"),
    }
    let left: Option<String> = raw(&cluster)
        .await
        .get("lock:order:9")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(left, None, "an unreplicated acquire releases its key");
}

/// Semaphores and read-write locks on the cluster, for plain and hash-tagged key shapes: every
/// key of one (lock key, share set, waiter queue, fencing counter) sits in one slot, so its
/// scripts run (no `CROSSSLOT`); a queued waiter is handed a released permit; readers share
/// and exclude a writer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphores_and_rw_locks_keep_their_keys_in_one_slot() {
    let cluster = RedisCluster::start();
    let locks = manager(&cluster).await;
    let mut con = raw(&cluster).await;
    let wait = LockOptions::new(Duration::from_secs(5)).wait(Duration::from_secs(5));
    for key in ["pool:1", "{user:7}:pool", "a{}b", "x}{y"] {
        let full = format!("lock:{key}");
        let shares = lockcore::keyspace::shares_key("lock:", &full);
        assert_eq!(
            RedisCluster::slot_for_key(&shares),
            RedisCluster::slot_for_key(&full),
            "{key:?}"
        );
        let sem = locks.semaphore(key, 2);
        let a = sem
            .acquire(&wait)
            .await
            .unwrap_or_else(|e| panic!("{key:?}: {e}"));
        let b = sem
            .acquire(&wait)
            .await
            .unwrap_or_else(|e| panic!("{key:?}: {e}"));
        let queued = tokio::spawn({
            let (sem, wait) = (sem.clone(), wait.clone());
            async move { sem.acquire(&wait).await }
        });
        let (queue, _) = lockcore::keyspace::waiter_queue_keys("lock:", &full);
        let until = Instant::now() + Duration::from_secs(5);
        while !con.exists::<_, bool>(&queue).await.unwrap_or(false) {
            assert!(
                Instant::now() < until,
                "{key:?}: the third caller never queued"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        a.release().await.unwrap_or_else(|e| panic!("{key:?}: {e}"));
        let c = tokio::time::timeout(Duration::from_secs(5), queued)
            .await
            .unwrap_or_else(|_| panic!("{key:?}: not handed the permit"))
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|e| panic!("{key:?}: {e}"));
        assert!(c.fencing_token() > b.fencing_token(), "{key:?}");
        assert_eq!(sem.available().await.unwrap_or_else(|e| panic!("{e}")), 0);
        b.release().await.unwrap_or_else(|e| panic!("{e}"));
        c.release().await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(sem.available().await.unwrap_or_else(|e| panic!("{e}")), 2);

        let rw = locks.rw_lock(&format!("{key}:rw"));
        let r1 = rw
            .try_read(&once(5_000))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let r2 = rw
            .try_read(&once(5_000))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(r1.is_some() && r2.is_some(), "{key:?}: readers share");
        let none = rw
            .try_write(&once(5_000))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(none.is_none(), "{key:?}: readers exclude the writer");
        for reader in [r1, r2].into_iter().flatten() {
            reader.release().await.unwrap_or_else(|e| panic!("{e}"));
        }
        let writer = rw
            .write(&wait)
            .await
            .unwrap_or_else(|e| panic!("{key:?}: {e}"));
        writer.release().await.unwrap_or_else(|e| panic!("{e}"));
    }
}
