//! Idempotency under a lost lock: a first call whose lock ended while its body ran stores
//! nothing and returns `Err(Lost)`, so that one idempotency key is answered with one value.
//! Through `LockManager::idempotent` and `#[lockcore::idempotent]`, with the stall made by a
//! `FaultProxy` on the first call's connection.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use lockcore::{Idempotency, LockError, LockManager, LockOptions, idempotent};
use lockcore_tests::*;
use tokio::sync::oneshot;

#[derive(Debug, thiserror::Error)]
enum AppError {
    #[error(transparent)]
    Lock(#[from] LockError),
}

/// The lock of every call here: 300 ms, watchdog on, a duplicate waits up to 5 s.
fn lock_options() -> LockOptions {
    LockOptions::new(Duration::from_millis(300))
        .watchdog(true)
        .wait(Duration::from_secs(5))
}

fn idem() -> Idempotency {
    Idempotency::new(Duration::from_secs(60)).lock_options(lock_options())
}

/// How long the first call's body works, and how long its connection stalls.
const WORK: Duration = Duration::from_millis(1200);
const STALL: Duration = Duration::from_millis(700);

/// One call: `value` after `work`, telling `started` when the body begins.
type Call = fn(
    LockManager,
    u64,
    Duration,
    Option<oneshot::Sender<()>>,
) -> std::pin::Pin<Box<dyn Future<Output = Result<u64, AppError>> + Send>>;

async fn through_the_manager(
    m: LockManager,
    value: u64,
    work: Duration,
    started: Option<oneshot::Sender<()>>,
) -> Result<u64, AppError> {
    m.idempotent("req:stall", &idem(), || async move {
        if let Some(started) = started {
            let _ = started.send(());
        }
        tokio::time::sleep(work).await;
        Ok(value)
    })
    .await
}

#[idempotent(key = "req:<request_id>", ttl_ms = 60_000, manager = m, wait_ms = 5000)]
async fn through_the_attribute(
    m: &LockManager,
    request_id: &str,
    value: u64,
    work: Duration,
    started: Option<oneshot::Sender<()>>,
) -> Result<u64, AppError> {
    if let Some(started) = started {
        let _ = started.send(());
    }
    tokio::time::sleep(work).await;
    Ok(value)
}

/// The scenario: call A (value 1, 1.2 s of work) on a manager behind a proxy whose replies
/// stall for 700 ms once A's body runs, so that A's 300 ms lease ends and its watchdog knows
/// it; duplicate B (value 2) on its own manager queues, gets the lock, runs and stores; then a
/// retry (value 3). Returns A, B and the retry. With a `stall` of zero nothing stalls.
async fn stalled_first_call(call: Call, stall: Duration) -> [Result<u64, AppError>; 3] {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(&server).await;
    let build = |url: String| async move {
        LockManager::builder()
            .url(url)
            .default_options(lock_options())
            .build()
            .await
            .expect("manager")
    };
    let a = build(proxy.url()).await;
    let b = build(server.url()).await;
    let (started, body_runs) = oneshot::channel();
    let first = tokio::spawn(call(a, 1, WORK, Some(started)));
    body_runs.await.expect("A's body starts");
    proxy.set_latency(Direction::Replies, stall);
    let duplicate = tokio::spawn(call(b.clone(), 2, Duration::ZERO, None));
    // The stall itself: A's connection answers nothing for this long.
    tokio::time::sleep(stall).await;
    proxy.set_latency(Direction::Replies, Duration::ZERO);
    let first = first.await.expect("A's task");
    let duplicate = duplicate.await.expect("B's task");
    let retry = call(b, 3, Duration::ZERO, None).await;
    [first, duplicate, retry]
}

fn assert_one_value(outcome: [Result<u64, AppError>; 3]) {
    let [first, duplicate, retry] = outcome;
    let summary = format!("A = {first:?}, B = {duplicate:?}, retry = {retry:?}");
    assert!(
        matches!(duplicate, Ok(2)),
        "B got the lock after A's lease ended and stored its value: {summary}"
    );
    assert!(
        matches!(retry, Ok(2)),
        "the retry returns the one stored value, B's: {summary}"
    );
    assert!(
        matches!(&first, Err(AppError::Lock(LockError::Lost { key })) if key.contains("req:stall")),
        "A lost its lock before it could store: it must fail with `Lost`, never answer its own value: {summary}"
    );
}

fn manager_call(
    m: LockManager,
    value: u64,
    work: Duration,
    started: Option<oneshot::Sender<()>>,
) -> std::pin::Pin<Box<dyn Future<Output = Result<u64, AppError>> + Send>> {
    Box::pin(through_the_manager(m, value, work, started))
}

fn attribute_call(
    m: LockManager,
    value: u64,
    work: Duration,
    started: Option<oneshot::Sender<()>>,
) -> std::pin::Pin<Box<dyn Future<Output = Result<u64, AppError>> + Send>> {
    Box::pin(async move { through_the_attribute(&m, "stall", value, work, started).await })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_call_that_lost_its_lock_is_lost_and_the_key_keeps_one_value() {
    assert_one_value(stalled_first_call(manager_call, STALL).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attribute_path_is_lost_too() {
    assert_one_value(stalled_first_call(attribute_call, STALL).await);
}

/// The twin without the stall: A keeps its lease (the watchdog renews it), stores 1 and answers
/// it; B waits for A and returns A's value; so does the retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_stall_the_first_call_stores_and_everyone_gets_its_value() {
    for call in [manager_call as Call, attribute_call] {
        let [first, duplicate, retry] = stalled_first_call(call, Duration::ZERO).await;
        assert!(
            matches!((&first, &duplicate, &retry), (Ok(1), Ok(1), Ok(1))),
            "A = {first:?}, B = {duplicate:?}, retry = {retry:?}"
        );
    }
}

/// The record key and lock key of an idempotency key under the default prefix.
fn idem_keys(key: &str) -> (String, String) {
    lockcore::keyspace::idempotency_keys(lockcore::DEFAULT_KEY_PREFIX, key)
}

/// The lock is taken over while the body runs (the key now holds another holder's value), but
/// the guard cannot know it (no watchdog, a long TTL): the write script finds the lock not
/// this call's, stores nothing, and the call is `Lost`.
#[tokio::test]
async fn a_write_after_a_takeover_is_refused_and_stores_nothing() {
    let (_server, m, mut raw) = start_with_manager().await;
    let (record_key, lock_key) = idem_keys("req:taken");
    let idem = Idempotency::new(Duration::from_secs(60))
        .lock_options(LockOptions::new(Duration::from_secs(30)).wait(Duration::ZERO));
    let mut takeover = raw.clone();
    let taken = lock_key.clone();
    let result: Result<u64, AppError> = m
        .idempotent("req:taken", &idem, || async move {
            set_px(&mut takeover, &taken, "next-holder", 30_000).await;
            Ok(1)
        })
        .await;
    assert!(
        matches!(&result, Err(AppError::Lock(LockError::Lost { key })) if *key == lock_key),
        "{result:?}"
    );
    assert!(!exists(&mut raw, &record_key).await, "nothing stored");
    assert_eq!(
        get(&mut raw, &lock_key).await.as_deref(),
        Some("next-holder"),
        "the other holder's lock is left alone"
    );
}

/// Redlock: a record on one node of three (a write that reached no quorum, here set by hand)
/// answers nobody: the call runs the body and stores its own value on a quorum, and a retry
/// returns that one.
#[tokio::test]
async fn redlock_answers_only_a_record_a_quorum_holds() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let m = LockManager::builder()
        .nodes(&urls)
        .build()
        .await
        .expect("Redlock manager");
    let (record_key, _) = idem_keys("req:minority");
    let mut first = servers[0].connection().await;
    let minority = r#"{"v":1,"at_ms":1,"fingerprint":null,"value":9}"#;
    set_px(&mut first, &record_key, minority, 60_000).await;
    let idem = Idempotency::new(Duration::from_secs(60));
    let value: u64 = m
        .idempotent("req:minority", &idem, || async { Ok::<_, AppError>(1) })
        .await
        .expect("runs the body");
    assert_eq!(
        value, 1,
        "a record on one node of three is not a stored record"
    );
    let retry: u64 = m
        .idempotent("req:minority", &idem, || async { Ok::<_, AppError>(2) })
        .await
        .expect("retry");
    assert_eq!(retry, 1);
}

/// Redis Cluster: the write script touches the record key and its lock key, which share one
/// slot for every key shape (plain, hash-tagged, empty braces), so no call meets `CROSSSLOT`;
/// a retry returns the stored value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conditional_write_works_on_a_cluster_for_every_key_shape() {
    let cluster = RedisCluster::start();
    let m = cluster_manager(&cluster).await;
    let idem = Idempotency::new(Duration::from_secs(60));
    for (i, key) in ["req:plain", "{user:7}:req", "req:{}:empty", "{}req"]
        .into_iter()
        .enumerate()
    {
        let value = u64::try_from(i).unwrap() + 10;
        let stored: u64 = m
            .idempotent(key, &idem, || async move { Ok::<_, AppError>(value) })
            .await
            .unwrap_or_else(|e| panic!("{key}: {e:?}\n{}", cluster.log()));
        let again: u64 = m
            .idempotent(key, &idem, || async { Ok::<_, AppError>(0) })
            .await
            .unwrap_or_else(|e| panic!("{key}: {e:?}"));
        assert_eq!((stored, again), (value, value), "{key}");
        let (record_key, lock_key) = idem_keys(key);
        assert_eq!(
            key_slot(record_key.as_bytes()),
            key_slot(lock_key.as_bytes()),
            "{record_key} / {lock_key}"
        );
    }
}
