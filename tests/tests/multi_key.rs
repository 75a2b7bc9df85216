//! `acquire_many` on one node: the one-script fast path (`ACQUIRE_ALL`) when no key is held,
//! and its twin, the ordered fall-back when one is (still all or nothing); a fencing token per
//! key; a dropped or timed-out call leaves no key behind; `wait_for_replicas` after the bulk
//! set; the fair queue is never jumped; a Sentinel primary (one script call, one `WAIT`); and a
//! cluster, where keys in several slots take the ordered path and keys of one slot the fast
//! path.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use lockcore::{LockError, LockManager, LockOptions, MultiGuard};
use lockcore_tests::*;
use redis::aio::MultiplexedConnection;
use tokio::time::timeout;

const KEYS: [&str; 5] = ["acct:5", "acct:1", "acct:4", "acct:2", "acct:3"];
/// How many keys [`KEYS`] holds: the fencing counter grows by this much per bulk acquire.
const N_KEYS: u64 = 5;

fn full_keys() -> Vec<String> {
    let mut keys: Vec<String> = KEYS.iter().map(|key| full(key)).collect();
    keys.sort();
    keys
}

async fn none_exist(raw: &mut MultiplexedConnection, keys: &[String]) -> Vec<String> {
    let mut left = Vec::new();
    for key in keys {
        if exists(raw, key).await {
            left.push(key.clone());
        }
    }
    left
}

/// Every key holds its guard's value, with a TTL.
async fn assert_held_by(raw: &mut MultiplexedConnection, guard: &MultiGuard) {
    for lock in guard.guards() {
        assert_eq!(
            get(raw, lock.key()).await.as_deref(),
            Some(lock.stored_value())
        );
        assert!(pttl(raw, lock.key()).await > 0, "{} has a TTL", lock.key());
    }
}

/// `acquire_many(keys)`, asserting that the server behind `con` counted one script call for it.
async fn acquire_in_one_script_call(
    m: &LockManager,
    con: &mut MultiplexedConnection,
    keys: &[&str],
    opts: &LockOptions,
) -> MultiGuard {
    reset_stats(con).await;
    let all = m.acquire_many(keys, opts).await.expect("all free");
    assert_eq!(
        script_calls(con).await,
        1,
        "{} free keys, one script call",
        keys.len()
    );
    all
}

/// All keys free: one script call takes all five, each with its own token and fencing token,
/// minted in key order.
#[tokio::test]
async fn free_keys_are_taken_in_one_script_call() {
    let (_server, m, mut raw) = start_with_manager().await;
    let all = acquire_in_one_script_call(&m, &mut raw, &KEYS, &opts(5000, 1000)).await;
    assert_eq!(all.keys().collect::<Vec<_>>(), full_keys());
    assert_held_by(&mut raw, &all).await;
    let tokens = all.fencing_tokens();
    assert!(
        tokens.windows(2).all(|pair| pair[0] < pair[1]),
        "one fencing token per key, in key order: {tokens:?}"
    );
    let mut values: Vec<&str> = all.guards().iter().map(|g| g.token()).collect();
    values.dedup();
    assert_eq!(values.len(), KEYS.len(), "each key its own token");
    all.release().await.expect("release");
    assert_eq!(
        none_exist(&mut raw, &full_keys()).await,
        Vec::<String>::new()
    );
}

/// The twin: one key held, so the script changes nothing and the ordered path runs (more than
/// one script call); it is still all or nothing, and once the key is free it takes them all.
#[tokio::test]
async fn a_held_key_falls_back_to_ordered_acquisition_all_or_nothing() {
    let (_server, m, mut raw) = start_with_manager().await;
    let held = must_acquire(&m, "acct:4", &opts(5000, 0)).await;
    reset_stats(&mut raw).await;
    let error = m
        .acquire_many(KEYS, &opts(5000, 0))
        .await
        .expect_err("acct:4 is held");
    assert!(
        matches!(&error, LockError::Contended { key, .. } if *key == full("acct:4")),
        "{error:?}"
    );
    let calls = script_calls(&mut raw).await;
    assert!(
        calls > 1,
        "the fall-back acquires key by key: {calls} script calls"
    );
    let others: Vec<String> = full_keys()
        .into_iter()
        .filter(|key| *key != full("acct:4"))
        .collect();
    assert_eq!(
        none_exist(&mut raw, &others).await,
        Vec::<String>::new(),
        "the keys taken before acct:4 were released"
    );
    assert_eq!(
        get(&mut raw, &full("acct:4")).await.as_deref(),
        Some(held.stored_value())
    );

    // Waiting through the fall-back: the holder's release lets the ordered path finish.
    let waiting = {
        let m = m.clone();
        tokio::spawn(async move { m.acquire_many(KEYS, &opts(5000, 5000)).await })
    };
    // The waiter is queued on acct:4 once acct:1..3 are its own.
    for key in ["acct:1", "acct:2", "acct:3"] {
        assert!(
            appears_within_a_second(&mut raw, &full(key)).await,
            "{key} taken"
        );
    }
    held.release().await.expect("release");
    let all = waiting.await.expect("task").expect("all taken");
    assert_held_by(&mut raw, &all).await;
    all.release().await.expect("release");
}

/// The fast path never jumps the fair queue: with every key free but a live waiter queued on
/// one of them, the bulk script changes nothing, the ordered path finds the waiter ahead, and
/// the call fails without taking any key (the waiter keeps its turn).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_waiter_keeps_its_turn() {
    let (_server, m, mut raw) = start_with_manager().await;
    // Learn the queue keys' names from a real waiter, then let it go.
    let held = must_acquire(&m, "acct:1", &opts(30_000, 0)).await;
    let waiter = {
        let m = m.clone();
        tokio::spawn(async move { m.acquire("acct:1", &opts(5000, 5000)).await })
    };
    let (queue, entries) = wait_queue_len(&mut raw, 1).await;
    waiter.abort();
    assert!(
        queue_gone_within(&mut raw, Duration::from_secs(2))
            .await
            .is_some(),
        "the aborted waiter withdrew"
    );
    held.release().await.expect("release");
    // A live waiter of another process: queued, its waiter key valid for a minute.
    plant_waiter(
        &mut raw,
        &entries,
        "ghost",
        5000,
        "lock:__wake__:elsewhere",
        &fencing_counter_key(),
        60_000,
    )
    .await;
    let _: () = query(&mut raw, &cmd(&["RPUSH", &queue, "ghost"])).await;
    let _: () = query(&mut raw, &cmd(&["PEXPIRE", &queue, "60000"])).await;

    reset_stats(&mut raw).await;
    let error = m
        .acquire_many(["acct:1", "acct:2"], &opts(5000, 0))
        .await
        .expect_err("the queued waiter has the turn on acct:1");
    assert!(
        matches!(&error, LockError::Contended { key, .. } if *key == full("acct:1")),
        "{error:?}"
    );
    assert!(
        script_calls(&mut raw).await > 1,
        "the bulk script refused, the ordered path ran"
    );
    for key in ["acct:1", "acct:2"] {
        assert!(!exists(&mut raw, &full(key)).await, "{key} not taken");
    }
    assert_eq!(lrange(&mut raw, &queue).await, ["ghost"]);
}

/// Fencing tokens grow per key across calls, and a single-key acquire after a bulk one gets a
/// larger token still.
#[tokio::test]
async fn fencing_tokens_grow_per_key() {
    let (_server, m, _raw) = start_with_manager().await;
    let first = m.acquire_many(KEYS, &opts(5000, 0)).await.expect("first");
    let before = first.fencing_tokens();
    first.release().await.expect("release");
    let second = m.acquire_many(KEYS, &opts(5000, 0)).await.expect("second");
    let after = second.fencing_tokens();
    for (old, new) in before.iter().zip(&after) {
        assert!(new > old, "{before:?} then {after:?}");
    }
    assert!(after.iter().min() > before.iter().max());
    second.release().await.expect("release");
    let one = must_acquire(&m, "acct:1", &opts(5000, 0)).await;
    assert!(Some(&one.fencing_token()) > after.iter().max());
    one.release().await.expect("release");
}

/// Redis is paused, so the bulk script is surely on the wire when the `acquire_many` future is
/// dropped; once Redis runs it, the releases spawned on drop remove every key.
#[tokio::test]
async fn acquire_many_dropped_while_the_script_is_on_the_wire_leaves_no_key() {
    let (_server, m, mut raw) = start_with_manager().await;
    pause_all_clients(&mut raw, 300).await;
    let cut = timeout(
        Duration::from_millis(20),
        m.acquire_many(KEYS, &opts(30_000, 5000)),
    )
    .await;
    assert!(cut.is_err(), "Redis is paused: the call cannot finish");
    for key in full_keys() {
        assert_set_ran_then_key_gone(
            &mut raw,
            &key,
            N_KEYS,
            "the dropped bulk acquire's keys were not cleaned up",
        )
        .await;
    }
}

/// Many calls dropped at random points (guards included): afterwards no key is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_many_dropped_at_random_points_leaves_no_key() {
    let (_server, m, mut raw) = start_with_manager().await;
    let o = LockOptions::new(Duration::from_secs(30));
    let (mut got, mut cut_off) = (0u64, 0u64);
    for _ in 0..300 {
        let budget = Duration::from_micros(fastrand::u64(0..2000));
        match timeout(budget, m.acquire_many(KEYS, &o)).await {
            Ok(Ok(guard)) => {
                got += 1;
                drop(guard);
            }
            Ok(Err(e)) => panic!("within 2 ms only guards or a timeout can come back: {e:?}"),
            Err(_elapsed) => cut_off += 1,
        }
    }
    eprintln!("{got} guard sets, {cut_off} calls cut off");
    assert!(
        cut_off > 0,
        "no call was cut off; the test exercised nothing"
    );
    for key in full_keys() {
        assert_gone_within(&mut raw, &key, Duration::from_secs(1)).await;
    }
}

/// A lost reply (the response timeout passes while Redis is paused) fails with
/// `LockError::Redis`, and the keys the script set once Redis ran are cleaned up.
#[tokio::test]
async fn a_lost_reply_cleans_up_every_key() {
    let server = RedisServer::start();
    let m = manager_with_timeout(&server, Duration::from_millis(50)).await;
    let mut raw = server.connection().await;
    pause_all_clients(&mut raw, 300).await;
    let error = m
        .acquire_many(KEYS, &opts(30_000, 0))
        .await
        .expect_err("no reply within 50 ms");
    assert!(matches!(error, LockError::Redis(_)), "{error:?}");
    for key in full_keys() {
        assert_set_ran_then_key_gone(&mut raw, &key, N_KEYS, "lost reply").await;
    }
}

/// `wait_for_replicas` applies to the bulk set: with no replica to acknowledge, the call fails
/// with `NotReplicated` and every key is released; with zero replicas required it succeeds.
#[tokio::test]
async fn wait_for_replicas_follows_the_bulk_set() {
    let server = RedisServer::start();
    let mut raw = server.connection().await;
    let strict = manager_with(&server, |b| {
        b.wait_for_replicas(1, Duration::from_millis(50))
    })
    .await;
    let error = strict
        .acquire_many(KEYS, &opts(30_000, 0))
        .await
        .expect_err("no replica");
    assert!(
        matches!(&error, LockError::NotReplicated { needed: 1, .. }),
        "{error:?}"
    );
    assert_eq!(
        none_exist(&mut raw, &full_keys()).await,
        Vec::<String>::new()
    );

    let lenient = manager_with(&server, |b| {
        b.wait_for_replicas(0, Duration::from_millis(50))
    })
    .await;
    reset_stats(&mut raw).await;
    let all = lenient
        .acquire_many(KEYS, &opts(5000, 0))
        .await
        .expect("zero replicas needed");
    let stats = commandstats(&mut raw).await;
    assert_eq!(calls_of(&stats, "evalsha") + calls_of(&stats, "eval"), 1);
    assert_eq!(calls_of(&stats, "wait"), 1, "one WAIT covers the bulk set");
    all.release().await.expect("release");
}

// ---- Redis Cluster ------------------------------------------------------------------------------

async fn node_connection(url: &str) -> MultiplexedConnection {
    redis::Client::open(url)
        .expect("node url")
        .get_multiplexed_async_connection()
        .await
        .expect("node connection")
}

/// Keys in several slots take the ordered path and work (all or nothing, a fencing token per
/// key); keys of one hash tag take the fast path: one script call on their slot's primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_keys_in_several_slots_and_in_one() {
    let cluster = RedisCluster::start();
    let m = cluster_manager(&cluster).await;
    let spread = ["order:1", "order:2", "order:3", "user:9", "cart:7"];
    let slots: std::collections::BTreeSet<u16> = spread
        .iter()
        .map(|key| RedisCluster::slot_for_key(&full(key)))
        .collect();
    assert!(slots.len() > 1, "the keys sit in several slots");
    let all = m
        .acquire_many(spread, &opts(5000, 0))
        .await
        .expect("spread");
    assert_eq!(all.guards().len(), spread.len());
    assert!(all.fencing_tokens().iter().all(|&token| token > 0));
    // All or nothing across slots: a second caller gets none of them.
    let other = cluster_manager(&cluster).await;
    let error = other
        .acquire_many(["order:0", "order:3"], &opts(5000, 0))
        .await
        .expect_err("order:3 is held");
    assert!(error.is_contended(), "{error:?}");
    all.release().await.expect("release");
    let again = other
        .acquire_many(["order:0", "order:3"], &opts(5000, 0))
        .await
        .expect("free again");
    again.release().await.expect("release");

    let tagged = ["{acct}:1", "{acct}:2", "{acct}:3"];
    let primary = cluster.primary_for_key(&full(tagged[0]));
    let mut node = node_connection(&primary.url()).await;
    let first = m
        .acquire_many(tagged, &opts(5000, 0))
        .await
        .expect("tagged");
    let before = first.fencing_tokens();
    first.release().await.expect("release");
    let second = acquire_in_one_script_call(&m, &mut node, &tagged, &opts(5000, 0)).await;
    for (old, new) in before.iter().zip(second.fencing_tokens()) {
        assert!(new > *old, "fencing tokens grow per key");
    }
    for guard in second.guards() {
        assert_eq!(
            get(&mut node, guard.key()).await.as_deref(),
            Some(guard.stored_value())
        );
    }
    second.release().await.expect("release");
}

// ---- Sentinel -----------------------------------------------------------------------------------

/// On a Sentinel primary with `wait_for_replicas(1, ..)`: the free keys are taken in one script
/// call, one `WAIT` covers them all, and the replica has every key with its guard's value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_primary_takes_free_keys_in_one_call_and_waits_once() {
    let setup = SentinelSetup::start();
    let m = LockManager::builder()
        .sentinel(setup.sentinel_urls(), setup.master_name())
        .wait_for_replicas(1, Duration::from_millis(300))
        .build()
        .await
        .unwrap_or_else(|e| panic!("sentinel manager: {e}\n{}", setup.log()));
    let mut primary = node_connection(&setup.current_primary_url()).await;
    let all = acquire_in_one_script_call(&m, &mut primary, &KEYS, &opts(5000, 0)).await;
    let stats = commandstats(&mut primary).await;
    assert_eq!(calls_of(&stats, "wait"), 1, "one WAIT covers the bulk set");
    let mut replica = node_connection(&setup.replica_url()).await;
    for guard in all.guards() {
        assert_eq!(
            get(&mut replica, guard.key()).await.as_deref(),
            Some(guard.stored_value()),
            "{} acknowledged by the replica",
            guard.key()
        );
    }
    all.release().await.expect("release");
}
