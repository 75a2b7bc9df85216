//! `FencingCounter::Off`: a plain `SET NX PX` acquire that mints no fencing token,
//! whose token 0 every fenced resource refuses with an error that says fencing is off; and a
//! key set whose first lease ends while a later key is waited for.

use std::time::Duration;

use lockcore::{
    FenceError, FenceGate, FencedRedis, FencingCounter, LockError, LockManager, LockOptions,
};
use lockcore_tests::*;

fn once(ttl_ms: u64) -> LockOptions {
    LockOptions::new(Duration::from_millis(ttl_ms)).wait(Duration::ZERO)
}

/// Off: token 0, no counter key, refused by `FencedRedis` and `FenceGate`; the twin (fencing
/// on, the default) writes to the same resources.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_off_mints_nothing_and_fenced_resources_refuse_it() {
    let server = RedisServer::start();
    let off = manager_with(&server, |b| b.fencing_counter(FencingCounter::Off)).await;
    let on = manager(&server).await;
    let mut raw = server.connection().await;

    let guard = off
        .try_acquire("stock:1", &once(5_000))
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("free"));
    assert_eq!(guard.fencing_token(), 0);
    assert!(
        !exists(&mut raw, &fencing_counter_key()).await,
        "no counter is touched"
    );
    let resource = FencedRedis::new("stock:fenced");
    match resource.set(&mut raw, guard.fencing_token(), 7).await {
        Err(FenceError::Stale(refused)) => {
            assert!(refused.is_fencing_off());
            assert!(refused.to_string().contains("fencing is off"), "{refused}");
        }
        other => panic!("a token of a fencing-off lock must be refused, got {other:?}"),
    }
    let gate = FenceGate::new("stock:gate", 0u32);
    let refused = gate.write(guard.fencing_token(), |v| *v += 1);
    assert!(
        refused.is_err_and(|e| e.is_fencing_off()),
        "FenceGate refuses token 0"
    );
    assert!(guard.release().await.is_ok());

    let fenced = on
        .try_acquire("stock:1", &once(5_000))
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("free"));
    assert!(fenced.fencing_token() > 0);
    assert!(
        resource
            .set(&mut raw, fenced.fencing_token(), 7)
            .await
            .is_ok()
    );
    assert!(gate.write(fenced.fencing_token(), |v| *v += 1).is_ok());
    assert!(fenced.release().await.is_ok());
}

/// Off keeps the hand-off queue: a contended waiter is handed the lock on release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_off_still_hands_off() {
    let server = RedisServer::start();
    let off = manager_with(&server, |b| b.fencing_counter(FencingCounter::Off)).await;
    let mut raw = server.connection().await;
    let holder = off
        .try_acquire("hot", &once(5_000))
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("free"));
    let waiter = off.clone();
    let waiting = tokio::spawn(async move {
        waiter
            .acquire(
                "hot",
                &LockOptions::new(Duration::from_secs(5)).wait(Duration::from_secs(5)),
            )
            .await
    });
    wait_queue_len(&mut raw, 1).await;
    assert!(holder.release().await.is_ok());
    let handed = waiting
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|e| panic!("waiter: {e}"));
    assert_eq!(handed.fencing_token(), 0);
    assert!(handed.release().await.is_ok());
}

/// Keys taken one by one: when the first lease (ttl 300 ms, no watchdog) ends while the second
/// key is still held by someone else (500 ms), the set was never held as a whole: `Lost`, and
/// nothing is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_set_whose_first_lease_ended_is_not_returned() {
    let server = RedisServer::start();
    let locks = manager(&server).await;
    let other: LockManager = manager(&server).await;
    let mut raw = server.connection().await;
    let blocker = other
        .try_acquire("set:b", &once(10_000))
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("free"));
    let releaser = tokio::spawn(async move {
        // The scenario: the other holder keeps `set:b` for 500 ms.
        tokio::time::sleep(Duration::from_millis(500)).await;
        blocker.release().await
    });
    let opts = LockOptions::new(Duration::from_millis(300)).wait(Duration::from_secs(3));
    let taken = locks.acquire_many(["set:a", "set:b"], &opts).await;
    assert!(
        matches!(&taken, Err(LockError::Lost { key }) if key == "lock:set:a"),
        "expected Lost for the expired first key, got {taken:?}"
    );
    assert!(releaser.await.is_ok());
    assert!(
        !exists(&mut raw, &full("set:b")).await,
        "the later key is released too"
    );
}
