//! `LockManager::close` waits for the acquire calls in flight, not only for the releases: an
//! acquire whose `SET` ran but whose reply has not arrived, and a queued waiter handed the key
//! while its manager closes, have given the key back by the time `close` returns, so a runtime
//! that ends right after (as `main` does) leaves no key to expire with its TTL.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::future::Future;
use std::time::Duration;

use lockcore::{LockError, LockManager};
use lockcore_tests::*;
use redis::aio::MultiplexedConnection;

/// A manager whose connections run through `proxy`, with a generous response timeout (the
/// proxy holds replies back).
async fn through(proxy: &FaultProxy) -> LockManager {
    LockManager::builder()
        .url(proxy.url())
        .response_timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap()
}

/// Polls (bounded, 4 s) until a key matching `pattern` exists on the server: there is no signal for a change
/// made on Redis by another client.
async fn until(raw: &mut MultiplexedConnection, pattern: &str) -> bool {
    for _ in 0..400 {
        if !keys(raw, pattern).await.is_empty() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

/// An acquire whose `SET` ran (its reply held back 400 ms by a proxy) when `close` is called;
/// `close` returns and the runtime ends at once: the key is gone. Twin: without the close the
/// acquire returns a guard that holds the key, and a runtime that ends then leaves the key for
/// its TTL (what an acquire left in flight by close would leave).
#[test]
fn an_acquire_in_flight_is_given_back_before_close_returns() {
    let server = RedisServer::start();
    let helper = multi_thread_runtime(1);
    let proxy = helper.block_on(FaultProxy::start(&server));
    for close in [true, false] {
        let key = format!("in-flight:runtime-ends:{close}");
        let runtime = multi_thread_runtime(2);
        let returned = runtime.block_on(async {
            let locks = through(&proxy).await;
            let mut raw = server.connection().await;
            proxy.set_latency(Direction::Replies, Duration::from_millis(400));
            let call = {
                let (locks, key) = (locks.clone(), key.clone());
                tokio::spawn(async move {
                    let guard = locks.acquire(&key, &opts(30_000, 0)).await?;
                    let held = guard.is_held();
                    // Left to the runtime's end, as a body still running at shutdown.
                    std::mem::forget(guard);
                    Ok::<bool, LockError>(held)
                })
            };
            assert!(until(&mut raw, &full(&key)).await, "the acquire's SET ran");
            if close {
                let closed = locks.close().await;
                let left = pttl(&mut raw, &full(&key)).await;
                proxy.set_latency(Direction::Replies, Duration::ZERO);
                // The acquire's task is left to the runtime's end, as `main` leaves it.
                drop(call);
                format!("close -> {closed:?}; PTTL when close returned: {left}")
            } else {
                let outcome = call.await.unwrap();
                proxy.set_latency(Direction::Replies, Duration::ZERO);
                format!("acquire -> {outcome:?}")
            }
        });
        drop(runtime);
        let left = current_thread_runtime().block_on(async {
            let mut raw = server.connection().await;
            pttl(&mut raw, &full(&key)).await
        });
        if close {
            assert!(
                left < 0,
                "close returned and the runtime ended, but the in-flight acquire's key stays for its TTL: PTTL {left} ({returned})"
            );
        } else {
            assert!(
                returned == "acquire -> Ok(true)" && left > 0,
                "control: {returned}, PTTL after the runtime ended {left}"
            );
        }
    }
    drop(helper);
}

/// A waiter queued behind a holder is handed the key by the holder's release while its
/// manager closes (the grant's wake-up and the reply of the waiter's re-check held back 600 ms
/// by a proxy, close called while that re-check is in flight): the acquire returns
/// `Err(Closed)`, and when `close` returns the key no longer holds the waiter's token. Twin:
/// without the close, the waiter is handed the key and holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_waiter_handed_the_key_while_closing_leaves_nothing() {
    let server = RedisServer::start();
    let mut raw = server.connection().await;
    let holders = manager(&server).await;
    for close in [true, false] {
        let key = format!("queued:{close}");
        let proxy = FaultProxy::start(&server).await;
        let waiters = through(&proxy).await;
        let holder = holders.acquire(&key, &opts(30_000, 0)).await.unwrap();
        let waiter = {
            let (waiters, key) = (waiters.clone(), key.clone());
            tokio::spawn(async move {
                let guard = waiters.acquire(&key, &opts(30_000, 20_000)).await?;
                Ok::<bool, LockError>(guard.is_held())
            })
        };
        assert!(until(&mut raw, "*waitq*").await, "the waiter queued");
        // The reply of the waiter's attempt has arrived once a later command on the same
        // (multiplexed, in-order) connection has its reply: the waiter now waits for a grant.
        let probe = waiters
            .try_acquire(&format!("{key}:probe"), &opts(30_000, 0))
            .await
            .unwrap()
            .expect("the probe key is free");
        probe.release().await.unwrap();
        proxy.set_latency(Direction::Replies, Duration::from_millis(600));
        let before = script_calls(&mut raw).await;
        holder.release().await.unwrap();
        let handed = get(&mut raw, &full(&key)).await;
        // The grant's wake-up is held back: the waiter's next re-check (within 250 ms of its
        // last) runs on Redis and waits 600 ms for its reply. Poll (no signal for a script run
        // by another client) until it ran (the release is one script call, the re-check the
        // next), for at most 400 ms: a re-check that ran just before `before` was read is in
        // flight too.
        for _ in 0..80 {
            if script_calls(&mut raw).await > before + 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let at_close = if close {
            let closed = waiters.close().await;
            Some((closed, get(&mut raw, &full(&key)).await))
        } else {
            None
        };
        let outcome = tokio::time::timeout(Duration::from_secs(20), waiter)
            .await
            .expect("the waiter returns within its wait budget")
            .unwrap();
        let at_return = get(&mut raw, &full(&key)).await;
        proxy.set_latency(Direction::Replies, Duration::ZERO);
        let seen = format!(
            "handed: {handed:?}; close: {at_close:?}; acquire -> {outcome:?}, key then {at_return:?}"
        );
        match at_close {
            Some((closed, left)) => {
                assert!(handed.is_some(), "the release handed the key over: {seen}");
                assert!(closed.is_ok(), "{seen}");
                assert!(
                    matches!(outcome, Err(LockError::Closed)),
                    "the waiter gets Err(Closed): {seen}"
                );
                assert!(
                    left.is_none() && at_return.is_none(),
                    "close returned while the key held its waiter's token: {seen}"
                );
            }
            None => {
                assert!(matches!(outcome, Ok(true)), "control: {seen}");
                waiters.close().await.unwrap();
            }
        }
    }
}

/// An acquire future polled once and then kept without being polled (its call can never end)
/// does not hang `close`: close waits for it at most its cap (10 s), then returns; the call,
/// polled again, finds the manager closed and leaves nothing. (The twins above show that a
/// call that is polled is waited for.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_kept_unpolled_does_not_hang_close() {
    let (_server, locks, mut raw) = start_with_manager().await;
    let key = "unpolled";
    let options = opts(30_000, 0);
    let call = locks.acquire(key, &options);
    let mut call = std::pin::pin!(call);
    std::future::poll_fn(|cx| {
        let _ = call.as_mut().poll(cx);
        std::task::Poll::Ready(())
    })
    .await;
    let started = tokio::time::Instant::now();
    let closed = tokio::time::timeout(Duration::from_secs(30), locks.close())
        .await
        .expect("close returns despite the unpolled acquire");
    let took = started.elapsed();
    assert!(closed.is_ok(), "{closed:?}");
    assert!(
        took >= Duration::from_secs(9),
        "close waited for the call first: {took:?}"
    );
    let outcome = tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .expect("the call ends once polled");
    assert!(matches!(outcome, Err(LockError::Closed)), "{outcome:?}");
    assert!(get(&mut raw, &full(key)).await.is_none(), "nothing left");
}
