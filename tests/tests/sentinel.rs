//! lockcore through Redis Sentinel (1 primary + 1 replica + 3 sentinels, started by the
//! harness): a fail-over re-resolves the primary, calls in between fail as `Redis` errors
//! within their budget (never `Contended`), and `wait_for_replicas` (issue 10 §3).

use std::time::Duration;

use lockcore::{LockError, LockManager, LockOptions};
use lockcore_tests::SentinelSetup;
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
