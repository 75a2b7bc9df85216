//! Refusals before any network call: a duration Redis would get cut to whole milliseconds
//! (ttl, `hold_at_least`, extend's ttl), `#insecure` on a plain URL; and durations in messages
//! shown rounded. Each with its accepted twin.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use lockcore::{LockError, LockManager, LockOptions};
use lockcore_tests::*;

fn refused<T: std::fmt::Debug>(result: Result<T, LockError>, what: &str) -> String {
    match result {
        Err(LockError::InvalidOptions { reason }) => reason,
        other => panic!("{what}: expected InvalidOptions, got {other:?}"),
    }
}

#[tokio::test]
async fn a_sub_millisecond_remainder_is_refused_not_cut_off() {
    let (_server, locks, mut raw) = start_with_manager().await;
    let reason = refused(
        locks
            .acquire("whole", &LockOptions::new(Duration::from_micros(1_500)))
            .await,
        "ttl 1.5 ms",
    );
    assert!(reason.contains("whole milliseconds"), "{reason}");
    assert!(
        !exists(&mut raw, &full("whole")).await,
        "nothing was written"
    );

    let job = LockOptions::new(Duration::from_secs(10)).hold_at_least(Duration::from_micros(2_500));
    refused(locks.acquire("whole", &job).await, "hold_at_least 2.5 ms");
    assert!(
        !exists(&mut raw, &full("whole")).await,
        "nothing was written"
    );

    // Twin: whole milliseconds are accepted, and an extend by a remainder is refused while
    // the lease keeps its TTL.
    let mut guard = must_acquire(&locks, "whole", &LockOptions::new(Duration::from_secs(30))).await;
    refused(
        guard.extend(Duration::from_micros(1_500)).await,
        "extend 1.5 ms",
    );
    assert!(
        pttl(&mut raw, &full("whole")).await > 20_000,
        "the lease kept its TTL"
    );
    guard.extend(Duration::from_millis(2)).await.expect("2 ms");
    guard.release().await.ok();
}

#[tokio::test]
async fn insecure_on_a_plain_url_is_refused() {
    let server = RedisServer::start();
    let url = server.url();
    let reason = refused(
        LockManager::connect(&format!("{url}#insecure")).await,
        "#insecure",
    );
    assert!(reason.contains("#insecure"), "{reason}");
    // Twin: the same URL without the fragment connects.
    LockManager::connect(&url).await.expect("plain URL");
}

#[tokio::test]
async fn a_contended_message_shows_the_wait_rounded() {
    let (_server, locks, _raw) = start_with_manager().await;
    let _held = must_acquire(&locks, "busy", &opts(30_000, 0)).await;
    let err = locks.acquire("busy", &opts(30_000, 100)).await.unwrap_err();
    let LockError::Contended { waited, .. } = &err else {
        panic!("expected Contended, got {err:?}");
    };
    let shown = err.to_string();
    let tail = shown.rsplit("waiting ").next().unwrap();
    assert!(
        tail.ends_with("ms")
            && tail
                .trim_end_matches("ms")
                .chars()
                .all(|c| c.is_ascii_digit()),
        "whole milliseconds, not {tail:?} (waited {waited:?})"
    );
    assert_eq!(
        tail,
        format!("{}ms", (waited.as_nanos() + 500_000) / 1_000_000),
        "the field keeps the exact value, the message rounds it"
    );
}
