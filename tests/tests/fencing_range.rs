//! Fencing tokens over the whole range of a Redis counter: exact and strictly increasing above
//! 2^53 (where a Lua number, a double, can no longer hold every integer) and up to `i64::MAX`,
//! on every path that mints or compares one: the uncontended acquire, the one-attempt acquire,
//! the hand-over's grant, the several-keys acquire, and Redlock's counter raise.

use std::time::Duration;

use lockcore::{FenceError, FencedRedis, LockManager, LockOptions};
use lockcore_tests::*;
use tokio::time::{Instant, sleep};

const TWO_POW_53: u64 = 1 << 53;

fn hold() -> LockOptions {
    LockOptions::new(Duration::from_secs(5)).wait(Duration::from_secs(5))
}

async fn set_counter(server: &RedisServer, value: u64) {
    let mut raw = server.connection().await;
    let _: () = query(
        &mut raw,
        &cmd(&["SET", &fencing_counter_key(), &value.to_string()]),
    )
    .await;
}

/// One token from each minting path, in order: two uncontended acquires, a hand-over to a
/// queued waiter, a one-attempt acquire, then two keys at once.
async fn tokens_from_every_path(
    server: &RedisServer,
    locks: &LockManager,
    waiter: &LockManager,
) -> Vec<u64> {
    let mut tokens = Vec::new();
    for _ in 0..2 {
        let guard = must_acquire(locks, "range:a", &hold()).await;
        tokens.push(guard.fencing_token());
        assert!(guard.release().await.is_ok());
    }
    let holder = must_acquire(locks, "range:a", &hold()).await;
    tokens.push(holder.fencing_token());
    let queued = {
        let waiter = waiter.clone();
        tokio::spawn(async move { waiter.acquire("range:a", &hold()).await })
    };
    let mut raw = server.connection().await;
    wait_queue_len(&mut raw, 1).await;
    assert!(holder.release().await.is_ok());
    let handed = queued
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|e| panic!("the waiter is handed the lock: {e}"));
    tokens.push(handed.fencing_token());
    assert!(handed.release().await.is_ok());
    let once = locks
        .try_acquire("range:b", &hold())
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("range:b is free"));
    tokens.push(once.fencing_token());
    assert!(once.release().await.is_ok());
    let both = locks
        .acquire_many(["range:c", "range:d"], &hold())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    tokens.extend(both.fencing_tokens());
    assert!(both.release().await.is_ok());
    tokens
}

async fn run_from(start: u64) -> Vec<u64> {
    let server = RedisServer::start();
    let locks = manager(&server).await;
    let waiter = manager(&server).await;
    set_counter(&server, start).await;
    let tokens = tokens_from_every_path(&server, &locks, &waiter).await;
    let mut raw = server.connection().await;
    let counter: String = query(&mut raw, &cmd(&["GET", &fencing_counter_key()])).await;
    assert_eq!(
        counter,
        tokens.last().map(u64::to_string).unwrap_or_default(),
        "the counter holds the last token"
    );
    tokens
}

fn expected(start: u64, n: u64) -> Vec<u64> {
    (1..=n).map(|i| start + i).collect()
}

#[tokio::test(flavor = "current_thread")]
async fn tokens_stay_exact_across_two_to_the_53() {
    let start = TWO_POW_53 - 2;
    let tokens = run_from(start).await;
    assert_eq!(
        tokens,
        expected(start, 7),
        "every token is the counter's exact value"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn tokens_stay_exact_up_to_i64_max() {
    let max = u64::try_from(i64::MAX).unwrap_or(u64::MAX);
    let start = max - 7;
    let tokens = run_from(start).await;
    assert_eq!(tokens, expected(start, 7));
    assert_eq!(tokens.last(), Some(&max));
}

/// Above 2^53 a stale holder's fenced write is refused: its token differs from its
/// successor's by one, which a double would round away.
#[tokio::test(flavor = "current_thread")]
async fn a_stale_write_above_two_to_the_53_is_refused() {
    let server = RedisServer::start();
    let locks = manager_with_timeout(&server, Duration::from_secs(1)).await;
    set_counter(&server, TWO_POW_53 + 2).await;
    let mut raw = server.connection().await;
    let row = FencedRedis::new("stock:big");
    let stale = must_acquire(&locks, "big", &LockOptions::new(Duration::from_millis(50))).await;
    let deadline = Instant::now() + Duration::from_secs(2);
    while exists(&mut raw, &full("big")).await {
        assert!(Instant::now() < deadline, "the short lease expires");
        sleep(Duration::from_millis(5)).await;
    }
    let fresh = must_acquire(&locks, "big", &hold()).await;
    assert!(
        fresh.fencing_token() > stale.fencing_token(),
        "{} then {}",
        stale.fencing_token(),
        fresh.fencing_token()
    );
    row.set(&mut raw, fresh.fencing_token(), "fresh")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    match row.set(&mut raw, stale.fencing_token(), "stale").await {
        Err(FenceError::Stale(_)) => {}
        other => panic!("the stale holder's write must be refused, got {other:?}"),
    }
    drop(stale);
    assert!(fresh.release().await.is_ok());
}

/// Redlock: every quorum includes a node that mints 2^53 + 3, so that is the token; a winner
/// whose counter is behind is raised to it exactly, until a quorum holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_raises_counters_exactly_above_two_to_the_53() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    for (server, start) in servers.iter().zip([1, 2, 2]) {
        set_counter(server, TWO_POW_53 + start).await;
    }
    let locks = LockManager::builder()
        .nodes(servers.iter().map(RedisServer::url))
        .node_timeout(Duration::from_millis(200))
        .build()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let guard = locks
        .try_acquire("big", &hold())
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("free"));
    let max = TWO_POW_53 + 3;
    assert_eq!(
        guard.fencing_token(),
        max,
        "the largest token the quorum minted"
    );
    let mut at_max = 0;
    for server in &servers {
        let mut raw = server.connection().await;
        let counter: String = query(&mut raw, &cmd(&["GET", &fencing_counter_key()])).await;
        let counter: u64 = counter.parse().unwrap_or_else(|e| panic!("{counter}: {e}"));
        assert!(counter <= max, "no counter passes the token: {counter}");
        at_max += usize::from(counter == max);
    }
    assert!(
        at_max >= 2,
        "a quorum of counters holds the token exactly ({at_max} of 3)"
    );
    assert!(guard.release().await.is_ok());
}
