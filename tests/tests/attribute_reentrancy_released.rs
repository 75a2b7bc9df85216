//! The attribute re-enters only a hold that is still held: a nested call under an enclosing
//! hold that `close` released fails with `Closed`, under one whose lease ran out with `Lost`;
//! its body never runs, never beside another client that took the key meanwhile.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lockcore::{LockError, LockGuard, LockManager, distributed_lock};
use lockcore_tests::*;

#[distributed_lock(key = "nested:<name>", ttl_ms = 10_000, manager = m, wait_ms = 0)]
async fn nested(m: &LockManager, name: &str, ran: &AtomicUsize) -> Result<(), LockError> {
    ran.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// How the enclosing hold ends before the nested call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// It does not: the nested call re-enters (the control).
    StillHeld,
    /// The manager's `close` released it.
    Closed,
    /// Its lease (watchdog off) ran out.
    Expired,
}

/// Ends the hold as `ending` says, lets `other` take the key when it is free, then makes the
/// nested call: what it returned, and the other client's guard.
#[distributed_lock(key = "nested:<name>", ttl_ms = 1_000, manager = m, wait_ms = 0, watchdog = false)]
async fn outer(
    m: &LockManager,
    other: &LockManager,
    name: &str,
    ending: Ending,
    ran: &AtomicUsize,
) -> Result<(Result<(), LockError>, Option<LockGuard>), LockError> {
    let key = format!("nested:{name}");
    match ending {
        Ending::StillHeld => {}
        Ending::Closed => m.close().await?,
        Ending::Expired => {
            // Bounded poll: the key's expiry on Redis has no signal.
            let mut taken = None;
            for _ in 0..500 {
                taken = other.try_acquire(&key, &opts(10_000, 0)).await?;
                if taken.is_some() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let taken = taken.expect("the 1 s lease ran out within 5 s");
            return Ok((nested(m, name, ran).await, Some(taken)));
        }
    }
    let theirs = other.try_acquire(&key, &opts(10_000, 0)).await?;
    Ok((nested(m, name, ran).await, theirs))
}

/// Twin: while the enclosing hold is held, the nested call re-enters and runs, and the other
/// client cannot take the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_call_reenters_only_a_hold_that_is_still_held() {
    let server = RedisServer::start();
    let other = manager(&server).await;
    let mut failures = Vec::new();
    for ending in [Ending::StillHeld, Ending::Closed, Ending::Expired] {
        let m = manager(&server).await;
        let name = format!("{ending:?}");
        let ran = AtomicUsize::new(0);
        let (nested, theirs) = outer(&m, &other, &name, ending, &ran).await.unwrap();
        let runs = ran.load(Ordering::SeqCst);
        let seen = format!(
            "{ending:?}: nested -> {nested:?}, its body ran {runs} times, the other client holds the key: {:?}",
            theirs.as_ref().map(LockGuard::is_held)
        );
        let expected = full(&format!("nested:{name}"));
        let right = match ending {
            Ending::StillHeld => nested.is_ok() && runs == 1 && theirs.is_none(),
            Ending::Closed => {
                theirs.is_some() && matches!(nested, Err(LockError::Closed)) && runs == 0
            }
            Ending::Expired => {
                theirs.is_some()
                    && matches!(&nested, Err(LockError::Lost { key }) if *key == expected)
                    && runs == 0
            }
        };
        if !right {
            failures.push(seen);
        }
        if let Some(theirs) = theirs {
            theirs.release().await.unwrap();
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
