//! What `#[distributed_lock]` takes from the manager's default options for what it does not set:
//! the watchdog follows the attribute's `watchdog = ..`, else the manager's explicit choice
//! (`LockManagerBuilder::default_options(opts.watchdog(..))`), else on.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use lockcore::{LockError, LockManager, LockOptions, distributed_lock};
use lockcore_tests::*;

/// How many leases the watchdog renews while the body runs (this lock's, if any).
#[distributed_lock(key = "wd:default", manager = m, wait_ms = 0)]
async fn renewals_default(m: &LockManager) -> Result<usize, LockError> {
    Ok(m.live_renewals())
}

#[distributed_lock(key = "wd:on", manager = m, wait_ms = 0, watchdog = true)]
async fn renewals_on(m: &LockManager) -> Result<usize, LockError> {
    Ok(m.live_renewals())
}

#[distributed_lock(key = "wd:off", manager = m, wait_ms = 0, watchdog = false)]
async fn renewals_off(m: &LockManager) -> Result<usize, LockError> {
    Ok(m.live_renewals())
}

async fn manager_defaulting(server: &RedisServer, opts: LockOptions) -> LockManager {
    manager_with(server, |builder| builder.default_options(opts)).await
}

/// No explicit choice anywhere: the attribute turns the watchdog on.
#[tokio::test]
async fn watchdog_is_on_when_nobody_chose() {
    let server = RedisServer::start();
    let m = manager_defaulting(&server, LockOptions::default()).await;
    assert_eq!(renewals_default(&m).await.expect("body"), 1);
    assert_eq!(renewals_off(&m).await.expect("body"), 0);
}

/// The manager's explicit `watchdog(false)` is what the attribute uses when it does not set
/// `watchdog`; the attribute's own argument still wins.
#[tokio::test]
async fn manager_default_watchdog_off_is_honoured() {
    let server = RedisServer::start();
    let m = manager_defaulting(&server, LockOptions::default().watchdog(false)).await;
    assert_eq!(
        renewals_default(&m).await.expect("body"),
        0,
        "the manager's default options turn the watchdog off"
    );
    assert_eq!(renewals_on(&m).await.expect("body"), 1);
}

/// The manager's explicit `watchdog(true)`, and the attribute's `false` over it.
#[tokio::test]
async fn manager_default_watchdog_on_is_honoured() {
    let server = RedisServer::start();
    let m = manager_defaulting(&server, LockOptions::default().watchdog(true)).await;
    assert_eq!(renewals_default(&m).await.expect("body"), 1);
    assert_eq!(renewals_off(&m).await.expect("body"), 0);
}
