//! lockcore through Redis Sentinel (1 primary + 1 replica + 3 sentinels, started by the
//! harness): a fail-over re-resolves the primary, calls in between fail as `Redis` errors
//! within their budget (never `Contended`), and `wait_for_replicas`.

use std::time::Duration;

use lockcore::{LockError, LockManager, LockOptions};
use lockcore_tests::{Direction, SentinelSetup};
use tokio::time::Instant;

async fn manager(setup: &SentinelSetup) -> LockManager {
    LockManager::builder()
        .sentinel(setup.sentinel_urls(), setup.master_name())
        .response_timeout(Duration::from_millis(300))
        .build()
        .await
        .unwrap_or_else(|e| panic!("sentinel manager: {e}\n{}", setup.log()))
}

fn once() -> LockOptions {
    LockOptions::new(Duration::from_secs(5)).wait(Duration::ZERO)
}

/// Kill the primary: acquisitions fail as `Redis` errors, each within its budget, until the
/// sentinels promote the replica; then they succeed on the new primary. Reports how long that
/// took.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_the_primary_then_acquisitions_resume_without_contended() {
    let setup = SentinelSetup::start();
    let locks = manager(&setup).await;
    let guard = locks
        .try_acquire("before", &once())
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("free"));
    assert!(guard.release().await.is_ok());
    setup.kill_primary();
    let killed_at = Instant::now();
    let budget = Duration::from_millis(300);
    let mut errors = 0;
    let mut resumed = None;
    // Bounded: 600 attempts of at most ~1 s each, and 30 s in all.
    for attempt in 0..600 {
        if killed_at.elapsed() > Duration::from_secs(30) {
            break;
        }
        let started = Instant::now();
        let opts = LockOptions::new(Duration::from_secs(5)).wait(budget);
        match locks.acquire(&format!("after:{attempt}"), &opts).await {
            Ok(guard) => {
                let _ = guard.release().await;
                resumed = Some(killed_at.elapsed());
                break;
            }
            Err(LockError::Redis(_)) => errors += 1,
            Err(other) => panic!("during the fail-over: {other:?} (expected only Redis errors)"),
        }
        assert!(
            started.elapsed() < budget + Duration::from_millis(1_500),
            "a call during the fail-over took {:?}",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let resumed = resumed.unwrap_or_else(|| {
        panic!(
            "no acquisition succeeded within 30 s of the kill\n{}",
            setup.log()
        )
    });
    eprintln!(
        "sentinel fail-over: acquisitions resumed {resumed:?} after the kill ({errors} Redis errors meanwhile)"
    );
    assert!(
        errors > 0,
        "the kill must be noticed (otherwise the test saw no fail-over)"
    );
}

/// `wait_for_replicas(1, ..)` succeeds with the one replica; asking for two cannot be met: the
/// acquire returns `NotReplicated` and leaves no key behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_replicas_acknowledged_or_released() {
    let setup = SentinelSetup::start();
    let one = LockManager::builder()
        .sentinel(setup.sentinel_urls(), setup.master_name())
        .wait_for_replicas(1, Duration::from_millis(300))
        .build()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut guard = one
        .try_acquire("replicated", &once())
        .await
        .unwrap_or_else(|e| panic!("one replica acknowledges: {e}"))
        .unwrap_or_else(|| panic!("free"));
    assert!(
        guard.extend(Duration::from_secs(6)).await.is_ok(),
        "extend is acknowledged"
    );
    assert!(guard.release().await.is_ok());

    let two = LockManager::builder()
        .sentinel(setup.sentinel_urls(), setup.master_name())
        .wait_for_replicas(2, Duration::from_millis(100))
        .build()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    match two.try_acquire("unreplicated", &once()).await {
        Err(LockError::NotReplicated { acked, needed, .. }) => {
            assert_eq!((acked, needed), (1, 2));
        }
        other => panic!("expected NotReplicated, got {other:?}"),
    }
    let primary =
        redis::Client::open(setup.current_primary_url()).unwrap_or_else(|e| panic!("{e}"));
    let mut con = primary
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let left: Option<String> = redis::cmd("GET")
        .arg("lock:unreplicated")
        .query_async(&mut con)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(left, None, "an unreplicated acquire releases its key");
}

/// A `WAIT` timeout of zero (forever) or not below the response timeout would hold the
/// manager's one connection past every call's bound: refused when the manager is built.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_replicas_timeout_must_stay_below_the_response_timeout() {
    let setup = SentinelSetup::start();
    for timeout in [Duration::ZERO, Duration::from_millis(500)] {
        let built = LockManager::builder()
            .sentinel(setup.sentinel_urls(), setup.master_name())
            .response_timeout(Duration::from_millis(500))
            .wait_for_replicas(1, timeout)
            .build()
            .await;
        assert!(
            matches!(&built, Err(LockError::InvalidOptions { reason }) if reason.contains("wait_for_replicas")),
            "timeout {timeout:?}: {built:?}"
        );
    }
}

/// How late the first primary's requests arrive through its proxy: long enough for the
/// sentinels to fail over (about 2.5 s here) while an acquire's script waits in the delay line.
const PRIMARY_STALL: Duration = Duration::from_secs(8);

async fn connect(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap_or_else(|e| panic!("{url}: {e}"))
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("{url}: {e}"))
}

/// `wait_for_replicas(1, ..)` across a fail-over. The sentinels reach the first primary P1 only
/// through a proxy, which delays its requests by 8 s: an acquire's script waits in the delay
/// line while the sentinels, whose pings go unanswered, promote a replica P2 and move the other
/// replica under it, and the manager follows `+switch-master` to P2. The script then runs on P1,
/// which no replica follows any more. An `Ok` acquire must mean that the key reached a replica
/// of the primary that took the write (here: that some node besides P1 holds it); otherwise the
/// acquire fails (`NotReplicated`, or a `Redis` error).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_replicas_covers_the_write_across_a_failover() {
    let (setup, proxy) = SentinelSetup::start_behind_proxy(2).await;
    let locks = LockManager::builder()
        .sentinel(setup.sentinel_urls(), setup.master_name())
        .response_timeout(PRIMARY_STALL + Duration::from_secs(1))
        .wait_for_replicas(1, Duration::from_millis(300))
        .build()
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", setup.log()));
    let warm = locks
        .try_acquire("warm-up", &once())
        .await
        .unwrap_or_else(|e| panic!("both replicas follow P1: {e}"))
        .unwrap_or_else(|| panic!("free"));
    assert!(warm.release().await.is_ok());

    proxy.set_latency(Direction::Requests, PRIMARY_STALL);
    let acquire = {
        let locks = locks.clone();
        tokio::spawn(async move { locks.try_acquire("failover", &once()).await })
    };
    setup.wait_for_failover(Duration::from_secs(6)).await;
    let new_primary = setup.current_primary_url();
    let mut p2 = connect(&new_primary).await;
    let _: () = redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg("probe")
        .query_async(&mut p2)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // The other replica follows P2, synced: a `WAIT` on P2 counts it.
    lockcore_tests::assert_replica_online_within(&mut p2, Duration::from_secs(4)).await;
    // The manager's own connection to P2: not a replica, a sentinel or this probe.
    let clients = lockcore_tests::cmd(&["CLIENT", "LIST"]);
    lockcore_tests::poll_reply_until(
        &mut p2,
        &clients,
        Duration::from_secs(3),
        "the manager connecting to P2",
        |clients| {
            clients
                .lines()
                .any(|line| line.contains(" name= ") && line.contains(" flags=N "))
        },
    )
    .await;
    assert!(
        !acquire.is_finished(),
        "the scenario needs the acquire's script still in the proxy's delay line once the manager follows P2"
    );
    let acquired = acquire.await.unwrap_or_else(|e| panic!("{e}"));
    match acquired {
        Ok(Some(guard)) => {
            let mut copies = Vec::new();
            for url in setup.data_urls() {
                let mut con = connect(&url).await;
                let value: Option<String> = redis::cmd("GET")
                    .arg(guard.key())
                    .query_async(&mut con)
                    .await
                    .unwrap_or_else(|e| panic!("{url}: {e}"));
                if value.as_deref() == Some(guard.stored_value()) {
                    copies.push(url);
                }
            }
            assert!(
                copies.len() >= 2,
                "an acquire with wait_for_replicas(1) returned Ok, but only {copies:?} holds the key \
                 (P1 = {}, P2 = {new_primary}): its WAIT did not cover the write",
                setup.primary_url()
            );
        }
        Ok(None) => panic!("the key was free"),
        Err(error) => assert!(
            matches!(error, LockError::NotReplicated { .. } | LockError::Redis(_)),
            "{error:?}"
        ),
    }
}
