//! The process-wide default manager and `#[distributed_lock]` without `manager = ..`.
//!
//! The default manager can be set once per process, so this binary has a single test that walks
//! through the whole flow in order.

// Test helpers outside `#[test]` fns may panic on failure too (clippy's allow-*-in-tests
// covers only the test fns themselves).
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::atomic::{AtomicUsize, Ordering};

use lockcore::{LockError, distributed_lock};
use lockcore_tests::*;

static BODY_RUNS: AtomicUsize = AtomicUsize::new(0);

#[distributed_lock(key = "dm:<id>", ttl_ms = 3000, wait_ms = 0)]
async fn uses_default(id: u32) -> Result<u32, LockError> {
    BODY_RUNS.fetch_add(1, Ordering::SeqCst);
    let m = lockcore::default_manager()?;
    let other = m.try_acquire(&format!("dm:{id}"), &opts(1000, 0)).await?;
    assert!(other.is_none(), "the body runs with the lock held");
    Ok(id * 10)
}

#[test]
fn default_manager_flow() {
    let server = RedisServer::start();
    let rt = multi_thread_runtime(2);
    rt.block_on(async {
        let mut raw = server.connection().await;

        // Not set yet: the API and the attribute both say so, and the body does not run.
        assert!(matches!(
            lockcore::default_manager(),
            Err(LockError::NoDefaultManager)
        ));
        let result = uses_default(1).await;
        assert!(
            matches!(result, Err(LockError::NoDefaultManager)),
            "got {result:?}"
        );
        assert_eq!(BODY_RUNS.load(Ordering::SeqCst), 0);

        let first = manager_with(&server, |builder| builder.key_prefix("first:")).await;
        let second = manager_with(&server, |builder| builder.key_prefix("second:")).await;
        lockcore::set_default_manager(first).expect("first set");
        let again = lockcore::set_default_manager(second);
        assert!(
            matches!(again, Err(LockError::DefaultManagerAlreadySet)),
            "a second set must fail, not replace: {again:?}"
        );
        let current = lockcore::default_manager().expect("set");
        assert_eq!(
            current.key_prefix(),
            "first:",
            "the first manager stays in place"
        );

        // The attribute uses it: key `first:dm:2`, held during the body, released after.
        assert_eq!(uses_default(2).await.expect("default manager"), 20);
        assert_eq!(BODY_RUNS.load(Ordering::SeqCst), 1);
        assert!(!exists(&mut raw, "first:dm:2").await);

        // Contended through the default manager: the body does not run.
        let held = must_acquire(&current, "dm:3", &opts(5000, 0)).await;
        let result = uses_default(3).await;
        assert!(
            result.as_ref().is_err_and(LockError::is_contended),
            "got {result:?}"
        );
        assert_eq!(BODY_RUNS.load(Ordering::SeqCst), 1);
        assert_eq!(
            get(&mut raw, "first:dm:3").await.as_deref(),
            Some(held.stored_value())
        );
        held.release().await.expect("release");
        assert!(
            pttl(&mut raw, "second:dm:3").await == -2,
            "the second manager was never used"
        );
    });
}
