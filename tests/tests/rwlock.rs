//! Read-write locks against a real `redis-server`: readers share, a writer excludes them, the
//! plain lock is the write lock, a queued writer is not starved by a stream of readers (and a
//! naive counting rwlock that starves it), a reader that arrives after a queued writer waits
//! (and the naive one that lets it in), a dead reader's share ends with its lease, and a
//! read-unlock whose cost does not grow with the readers. Every test runs its own server.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use lockcore::{LockError, LockGuard, RwLock};
use lockcore_tests::*;
use tokio::time::{Instant, sleep};

const KEY: &str = "prices";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_and_a_writer_excludes_them() {
    let server = RedisServer::start();
    let locks = manager(&server).await;
    let rw: RwLock = locks.rw_lock(KEY);
    let mut readers = Vec::new();
    for _ in 0..5 {
        readers.push(
            rw.try_read(&opts(10_000, 0))
                .await
                .unwrap()
                .expect("readers share"),
        );
    }
    assert!(
        rw.try_write(&opts(10_000, 0)).await.unwrap().is_none(),
        "readers exclude the writer"
    );
    assert!(
        locks
            .try_acquire(KEY, &opts(10_000, 0))
            .await
            .unwrap()
            .is_none(),
        "and the plain lock"
    );
    let tokens: Vec<u64> = readers.iter().map(LockGuard::fencing_token).collect();
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "a token per reader: {tokens:?}"
    );
    for reader in readers {
        reader.release().await.unwrap();
    }
    let writer = rw.try_write(&opts(10_000, 0)).await.unwrap().expect("free");
    assert!(
        rw.try_read(&opts(10_000, 0)).await.unwrap().is_none(),
        "the writer excludes readers"
    );
    writer.release().await.unwrap();
    let plain = locks
        .try_acquire(KEY, &opts(10_000, 0))
        .await
        .unwrap()
        .expect("free");
    assert!(
        rw.try_read(&opts(10_000, 0)).await.unwrap().is_none(),
        "the plain lock excludes readers"
    );
    assert!(
        rw.try_write(&opts(10_000, 0)).await.unwrap().is_none(),
        "and the writer"
    );
    plain.release().await.unwrap();
}

/// Readers, writers through `write` and writers through the plain `acquire` in a loop: a
/// writer is never inside with anybody, and readers were inside together.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_reader_overlaps_a_writer_and_plain_acquire_is_the_write_lock() {
    let server = RedisServer::start();
    let locks = manager(&server).await;
    let rw = locks.rw_lock(KEY);
    let readers_in = Arc::new(AtomicUsize::new(0));
    let writers_in = Arc::new(AtomicUsize::new(0));
    let most_readers = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for role in 0..6 {
        let (rw, locks) = (rw.clone(), locks.clone());
        let (readers_in, writers_in, most_readers, overlaps) = (
            readers_in.clone(),
            writers_in.clone(),
            most_readers.clone(),
            overlaps.clone(),
        );
        tasks.push(tokio::spawn(async move {
            for _ in 0..20 {
                let o = opts(5_000, 10_000);
                let guard = match role {
                    0 => rw.write(&o).await.unwrap(),
                    1 => locks.acquire(KEY, &o).await.unwrap(),
                    _ => rw.read(&o).await.unwrap(),
                };
                if role < 2 {
                    let before = writers_in.fetch_add(1, Ordering::SeqCst);
                    if before > 0 || readers_in.load(Ordering::SeqCst) > 0 {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    sleep(Duration::from_millis(2)).await;
                    writers_in.fetch_sub(1, Ordering::SeqCst);
                } else {
                    let now = readers_in.fetch_add(1, Ordering::SeqCst) + 1;
                    most_readers.fetch_max(now, Ordering::SeqCst);
                    if writers_in.load(Ordering::SeqCst) > 0 {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    sleep(Duration::from_millis(4)).await;
                    readers_in.fetch_sub(1, Ordering::SeqCst);
                }
                guard.release().await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "a writer was inside with someone"
    );
    assert!(
        most_readers.load(Ordering::SeqCst) > 1,
        "readers never shared"
    );
}

/// A stream of overlapping readers (there is always one inside) and a writer that arrives
/// while they run: the writer gets the lock after the readers ahead of it, not after the
/// stream ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_queued_writer_is_not_starved_by_a_stream_of_readers() {
    let server = RedisServer::start();
    let locks = manager(&server).await;
    let rw = locks.rw_lock(KEY);
    let stop = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    for i in 0..4_u64 {
        let (rw, stop) = (rw.clone(), stop.clone());
        readers.push(tokio::spawn(async move {
            sleep(Duration::from_millis(15 * i)).await;
            let until = Instant::now() + Duration::from_secs(5);
            while !stop.load(Ordering::SeqCst) && Instant::now() < until {
                let guard = rw.read(&opts(5_000, 5_000)).await.unwrap();
                sleep(Duration::from_millis(60)).await;
                guard.release().await.unwrap();
            }
        }));
    }
    sleep(Duration::from_millis(200)).await;
    let asked = Instant::now();
    let writer = rw
        .write(&opts(5_000, 3_000))
        .await
        .expect("the writer is served");
    let waited = asked.elapsed();
    writer.release().await.unwrap();
    stop.store(true, Ordering::SeqCst);
    for reader in readers {
        reader.await.unwrap();
    }
    println!("the writer waited {waited:?} behind a stream of 60 ms readers");
    assert!(
        waited < Duration::from_millis(600),
        "the writer waited {waited:?}"
    );
}

/// Naive twin: readers count themselves (INCR/DECR) and a writer waits for the count to reach
/// zero, ignoring arrival order. A stream of overlapping readers starves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn naive_twin_a_writer_waiting_for_zero_readers_is_starved() {
    let server = RedisServer::start();
    let con = server.connection().await;
    let stop = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    for i in 0..4_u64 {
        let (mut con, stop) = (con.clone(), stop.clone());
        readers.push(tokio::spawn(async move {
            sleep(Duration::from_millis(15 * i)).await;
            let until = Instant::now() + Duration::from_secs(5);
            while !stop.load(Ordering::SeqCst) && Instant::now() < until {
                let _: i64 = query(&mut con, &cmd(&["INCR", "naive:readers"])).await;
                sleep(Duration::from_millis(60)).await;
                let _: i64 = query(&mut con, &cmd(&["DECR", "naive:readers"])).await;
            }
        }));
    }
    sleep(Duration::from_millis(200)).await;
    let mut con = con.clone();
    let asked = Instant::now();
    let mut served = false;
    while asked.elapsed() < Duration::from_millis(1_500) {
        let readers: i64 = query(&mut con, &cmd(&["GET", "naive:readers"])).await;
        if readers == 0 {
            served = true;
            break;
        }
        sleep(Duration::from_millis(1)).await;
    }
    stop.store(true, Ordering::SeqCst);
    for reader in readers {
        reader.await.unwrap();
    }
    assert!(
        !served,
        "the naive writer found no reader inside within 1.5 s"
    );
}

/// A reader that arrives after a queued writer waits behind it: the writer is granted first.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reader_arriving_after_a_queued_writer_waits_behind_it() {
    let server = RedisServer::start();
    let mut raw = server.connection().await;
    let locks = manager(&server).await;
    let rw = locks.rw_lock(KEY);
    let first = rw.read(&opts(10_000, 0)).await.unwrap();
    let writer = {
        let rw = rw.clone();
        tokio::spawn(async move {
            let guard = rw.write(&opts(10_000, 5_000)).await.unwrap();
            let token = guard.fencing_token();
            sleep(Duration::from_millis(50)).await;
            guard.release().await.unwrap();
            token
        })
    };
    wait_queue_len(&mut raw, 1).await;
    assert!(
        rw.try_read(&opts(10_000, 0)).await.unwrap().is_none(),
        "a writer is queued ahead"
    );
    let late = {
        let rw = rw.clone();
        tokio::spawn(async move {
            let guard = rw.read(&opts(10_000, 5_000)).await.unwrap();
            let token = guard.fencing_token();
            guard.release().await.unwrap();
            token
        })
    };
    wait_queue_len(&mut raw, 2).await;
    first.release().await.unwrap();
    let (writer, late) = (writer.await.unwrap(), late.await.unwrap());
    assert!(
        writer < late,
        "the writer (token {writer}) went before the late reader ({late})"
    );
}

/// Naive twin: with readers that only count themselves, a reader that arrives while a writer
/// waits gets in at once, ahead of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn naive_twin_a_late_reader_jumps_a_waiting_writer() {
    let server = RedisServer::start();
    let mut con = server.connection().await;
    let _: i64 = query(&mut con, &cmd(&["INCR", "naive:readers"])).await;
    // A writer now waits for zero readers; a late reader does not look at it:
    let late: i64 = query(&mut con, &cmd(&["INCR", "naive:readers"])).await;
    assert_eq!(late, 2, "the late reader is inside while the writer waits");
}

/// A reader that dies (its guard forgotten: no release, no watchdog) frees its share when its
/// lease ends: a writer queued behind it gets the lock within the lease plus one re-check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_readers_share_is_freed_when_its_lease_ends() {
    let server = RedisServer::start();
    let locks = manager(&server).await;
    let rw = locks.rw_lock(KEY);
    let dead = rw.read(&opts(500, 0)).await.unwrap();
    let taken = Instant::now();
    std::mem::forget(dead);
    let writer = rw
        .write(&opts(5_000, 3_000))
        .await
        .expect("the share ended");
    let waited = taken.elapsed();
    assert!(
        waited >= Duration::from_millis(400),
        "the share lasted its lease: {waited:?}"
    );
    assert!(
        waited < Duration::from_millis(500 + 250 + 200),
        "freed at its lease end: {waited:?}"
    );
    writer.release().await.unwrap();
}

/// The cost of a read-unlock does not grow with the readers: releasing readers among 50 000
/// other live readers costs about what it costs among none (Redis' own time per call, from
/// `INFO commandstats`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_unlock_cost_does_not_grow_with_the_readers() {
    let server = RedisServer::start();
    let mut raw = server.connection().await;
    let locks = manager(&server).await;
    let rw = locks.rw_lock(KEY);
    let shares = lockcore::keyspace::shares_key(lockcore::DEFAULT_KEY_PREFIX, &full(KEY));
    let mut per_call = Vec::new();
    for others in [0_usize, 50_000] {
        let keep = rw.read(&opts(60_000, 0)).await.unwrap();
        let far = (server_now_ms(&mut raw).await + 60_000).to_string();
        for chunk in (0..others).collect::<Vec<_>>().chunks(5_000) {
            let mut zadd = cmd(&["ZADD", &shares]);
            for i in chunk {
                zadd.arg(&far).arg(format!("other-{i}"));
            }
            let _: i64 = query(&mut raw, &zadd).await;
        }
        let mut readers = Vec::new();
        for _ in 0..50 {
            readers.push(rw.read(&opts(60_000, 0)).await.unwrap());
        }
        reset_stats(&mut raw).await;
        for reader in readers {
            reader.release().await.unwrap();
        }
        let stats = commandstats(&mut raw).await;
        per_call.push(usec_per_call_of(&stats, "evalsha"));
        keep.release().await.unwrap();
        let _: i64 = query(&mut raw, &cmd(&["DEL", &shares, &full(KEY)])).await;
    }
    println!(
        "read-unlock: {:.1} µs among 0 readers, {:.1} µs among 50 000",
        per_call[0], per_call[1]
    );
    assert!(
        per_call[1] < per_call[0] * 4.0 + 20.0,
        "read-unlock cost grew: {per_call:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_on_a_read_locked_key_is_refused() {
    let server = RedisServer::start();
    let locks = manager(&server).await;
    let reader = locks.rw_lock(KEY).read(&opts(10_000, 0)).await.unwrap();
    let err = locks
        .semaphore(KEY, 2)
        .try_acquire(&opts(10_000, 0))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LockError::InvalidOptions { reason } if reason.contains("readers") && reason.contains("2 permits")),
        "{err:?}"
    );
    reader.release().await.unwrap();
}
