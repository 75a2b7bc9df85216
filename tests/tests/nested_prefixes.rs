//! Managers with different, nested prefixes on one server (`""`, `lock:`, `lock:sub:`): no
//! manager can take another's auxiliary keys (fencing counter, waiter queues, waiter keys,
//! idempotency records, wake-up channels), whatever its prefix, because a key whose full
//! name holds a reserved segment anywhere is refused as `InvalidKey`. The twins show what a
//! lock value under such a name does to the other manager.

use std::time::Duration;

use lockcore::{LockError, LockManager};
use lockcore_tests::*;

async fn manager_prefixed(server: &RedisServer, prefix: &str) -> LockManager {
    manager_with(server, |b| b.key_prefix(prefix)).await
}

/// Every auxiliary name of a manager with prefix `lock:` (and `lock:sub:`), as a key that a
/// manager with a shorter prefix could ask for.
fn foreign_auxiliary_names() -> Vec<(&'static str, String, &'static str)> {
    let (queue, waiters) = lockcore::keyspace::waiter_queue_keys("lock:sub:", "lock:sub:k");
    vec![
        (
            "",
            "lock:__fencing_counter__".to_owned(),
            "__fencing_counter__",
        ),
        (
            "",
            "lock:__fencing_counter__{abc}".to_owned(),
            "__fencing_counter__",
        ),
        (
            "lock:",
            "sub:__fencing_counter__".to_owned(),
            "__fencing_counter__",
        ),
        ("lock:", queue["lock:".len()..].to_owned(), "__waitq__"),
        (
            "lock:",
            format!("{}x", &waiters["lock:".len()..]),
            "__waiters__",
        ),
        ("", "lock:__idem__rec:order-1".to_owned(), "__idem__"),
        ("lock:", "sub:__idem__lock:order-1".to_owned(), "__idem__"),
        ("", "lock:__wake__:0123".to_owned(), "__wake__"),
        ("", "x__waitq__y".to_owned(), "__waitq__"),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_prefix_takes_another_managers_auxiliary_keys() {
    let server = RedisServer::start();
    let mut raw = server.connection().await;
    for (prefix, key, segment) in foreign_auxiliary_names() {
        let m = manager_prefixed(&server, prefix).await;
        match m.try_acquire(&key, &opts(10_000, 0)).await {
            Err(LockError::InvalidKey { reason }) => {
                assert!(
                    reason.contains(&format!("`{key}`")) && reason.contains(segment),
                    "the reason names the key and the reserved segment: {reason}"
                );
            }
            other => panic!("prefix {prefix:?} took {key:?}: {other:?}"),
        }
        assert!(
            !exists(&mut raw, &format!("{prefix}{key}")).await,
            "{prefix}{key} was written"
        );
    }
    // The owner of the names keeps working.
    let b = manager(&server).await;
    acquire_and_release(&b, "order:1", &opts(10_000, 0), "the default prefix").await;
}

/// Twin: what a lock value under the fencing counter's name does. A lock value is no
/// integer, so every acquire of the counter's owner fails for as long as it stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twin_a_lock_value_in_the_counter_breaks_every_acquire_of_its_owner() {
    let server = RedisServer::start();
    let mut raw = server.connection().await;
    set_px(
        &mut raw,
        &fencing_counter_key(),
        "2b1f0c7e-5d3a-4c2e-9a63-0e8f0f3a9b41 {\"pid\":1}",
        60_000,
    )
    .await;
    let b = manager(&server).await;
    let failed = b.acquire("order:1", &opts(10_000, 0)).await;
    let Err(LockError::Redis(err)) = &failed else {
        panic!("the counter's owner cannot acquire: {failed:?}");
    };
    assert!(err.to_string().contains("not an integer"), "{err}");
}

/// Twin: a string under a waiter queue's name (another manager's lock, if its prefix could
/// produce that name) is taken for a corrupt queue: the contended acquire deletes it. The
/// refusal above keeps any lock key from ever having such a name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twin_a_string_in_the_waiter_queue_is_destroyed_by_its_waiters() {
    let server = RedisServer::start();
    let mut raw = server.connection().await;
    let b = manager(&server).await;
    let held = must_acquire(&b, "order:1", &opts(10_000, 0)).await;
    let (queue, _) = lockcore::keyspace::waiter_queue_keys("lock:", held.key());
    set_px(&mut raw, &queue, "a lock value", 60_000).await;
    let waiting = b
        .acquire(
            "order:1",
            &opts(10_000, 200).retry_base(Duration::from_millis(10)),
        )
        .await;
    assert!(
        matches!(&waiting, Err(LockError::Contended { .. })),
        "{waiting:?}"
    );
    let kind: String = query(&mut raw, &cmd(&["TYPE", &queue])).await;
    assert_ne!(
        kind, "string",
        "the string under the queue's name was replaced"
    );
    assert!(held.release().await.is_ok());
}

/// A prefix that itself holds a reserved segment could take no key at all: refused when the
/// manager is built.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefix_with_a_reserved_segment_is_refused() {
    let server = RedisServer::start();
    for prefix in ["lock:__waitq__", "a__fencing_counter__:", "__wake__"] {
        let built = LockManager::builder()
            .url(server.url())
            .key_prefix(prefix)
            .build()
            .await;
        match built {
            Err(LockError::InvalidOptions { reason }) => {
                assert!(reason.contains(prefix), "{reason}");
            }
            other => panic!("prefix {prefix:?}: {other:?}"),
        }
    }
}
