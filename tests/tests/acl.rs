//! The whole feature set as an ACL user restricted to exactly the rule the guide documents
//! (`docs/src/topologies.md`, "ACL"), and no password in anything the library prints.

use std::time::Duration;

use lockcore::{LockError, LockManager, LockOptions};
use lockcore_tests::*;

/// The guide's minimal ACL rule for the default prefix `lock:`, after `user app on >PASSWORD`.
const RULE: &[&str] = &[
    "resetkeys",
    "~lock:*",
    "resetchannels",
    "&lock:*",
    "-@all",
    "+evalsha",
    "+eval",
    "+script|load",
    "+subscribe",
    "+get",
    "+set",
    "+del",
    "+incr",
    "+pexpire",
    "+pttl",
    "+exists",
    "+type",
    "+time",
    "+publish",
    "+lrem",
    "+lindex",
    "+lpop",
    "+lpush",
    "+rpush",
    "+hget",
    "+hset",
    "+hdel",
    "+zadd",
    "+zrem",
    "+zscore",
    "+zcard",
    "+zcount",
    "+zrange",
    "+zremrangebyscore",
];

const PASSWORD: &str = "pa55-w0rd-never-shown";

/// The guide's ACL rule, as a user copies it from the page: the words of the `text` block
/// that starts with `user app on`.
fn documented_rule() -> Vec<&'static str> {
    let page = include_str!("../../docs/src/topologies.md");
    let start = page
        .find("```text\nuser app on")
        .unwrap_or_else(|| panic!("docs/src/topologies.md has no `user app on` block"));
    let block = &page[start + "```text\n".len()..];
    let end = block
        .find("```")
        .unwrap_or_else(|| panic!("the ACL block in docs/src/topologies.md is not closed"));
    block[..end].split_whitespace().collect()
}

/// The rule the guide shows is the rule these tests run with, word for word.
#[test]
fn the_guide_shows_the_tested_rule() {
    let mut tested = vec!["user", "app", "on", ">PASSWORD"];
    tested.extend_from_slice(RULE);
    assert_eq!(
        documented_rule(),
        tested,
        "docs/src/topologies.md's ACL rule differs from the one tests/tests/acl.rs runs"
    );
}

fn restricted_server(extra: &[&str]) -> RedisServer {
    let password = format!(">{PASSWORD}");
    let mut args = vec!["--user", "app", "on", password.as_str()];
    args.extend_from_slice(RULE);
    args.extend_from_slice(extra);
    RedisServer::start_with_args(&args)
}

fn app_url(server: &RedisServer) -> String {
    format!("redis://app:{PASSWORD}@127.0.0.1:{}/", server.port())
}

/// A manager connected as the restricted user.
async fn app_manager(server: &RedisServer) -> LockManager {
    LockManager::connect(&app_url(server))
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"))
}

/// Acquire, hand-off to a queued waiter, extend, watchdog renewal, fencing and release, all as
/// the restricted user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_rule_covers_every_feature() {
    let server = restricted_server(&[]);
    let url = app_url(&server);
    let holder = LockManager::connect(&url)
        .await
        .unwrap_or_else(|e| panic!("connect as the restricted user: {e}\n{}", server.log()));
    let waiter = LockManager::connect(&url)
        .await
        .unwrap_or_else(|e| panic!("connect as the restricted user: {e}"));
    let ttl = Duration::from_millis(600);
    let watched = LockOptions::new(ttl).wait(Duration::ZERO).watchdog(true);
    let mut guard = holder
        .try_acquire("acl:item", &watched)
        .await
        .unwrap_or_else(|e| panic!("acquire: {e}"))
        .unwrap_or_else(|| panic!("the key is free"));
    let first_token = guard.fencing_token();
    assert!(guard.extend(Duration::from_secs(2)).await.is_ok(), "extend");
    // A queued waiter (pub/sub wake-up on the prefixed channel) gets the lock on release.
    let queued = tokio::spawn(async move {
        let opts = LockOptions::new(Duration::from_secs(2)).wait(Duration::from_secs(5));
        waiter.acquire("acl:item", &opts).await
    });
    let mut raw = server.connection().await;
    // The waiter is queued in Redis (so the release below hands over, and wakes it on the
    // prefixed channel).
    wait_queue_len(&mut raw, 1).await;
    // A watchdog renewal lands when the key's PTTL goes back up (it only falls in between);
    // renewals come every ttl/3 of 2 s. Bounded poll.
    let key = full("acl:item");
    let mut lowest = pttl(&mut raw, &key).await;
    let mut renewed = false;
    let until = tokio::time::Instant::now() + Duration::from_millis(1_500);
    while tokio::time::Instant::now() < until && !renewed {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let now = pttl(&mut raw, &key).await;
        renewed = now > lowest + 50;
        lowest = lowest.min(now);
    }
    assert!(renewed, "the watchdog renews as the restricted user");
    assert!(guard.is_held());
    assert!(guard.release().await.is_ok(), "release");
    let second = tokio::time::timeout(Duration::from_secs(5), queued)
        .await
        .unwrap_or_else(|_| panic!("the queued waiter was not handed the lock"))
        .unwrap_or_else(|e| panic!("waiter task: {e}"))
        .unwrap_or_else(|e| panic!("waiter acquire: {e}"));
    assert!(second.fencing_token() > first_token, "fencing tokens grow");
    assert!(second.release().await.is_ok());
}

/// Semaphore permits and readers (their sorted set, grants to queued waiters, renewal, count),
/// as the restricted user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_rule_covers_semaphores_and_read_write_locks() {
    let server = restricted_server(&[]);
    let locks = app_manager(&server).await;
    let opts = LockOptions::new(Duration::from_millis(600))
        .wait(Duration::from_secs(5))
        .watchdog(true);
    let sem = locks.semaphore("acl:pool", 1);
    let permit = sem
        .acquire(&opts)
        .await
        .unwrap_or_else(|e| panic!("permit: {e}"));
    let queued = {
        let sem = sem.clone();
        let opts = opts.clone();
        tokio::spawn(async move { sem.acquire(&opts).await })
    };
    let mut raw = server.connection().await;
    wait_queue_len(&mut raw, 1).await;
    // Past the TTL: the watchdog renews the permit.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(sem.available().await.unwrap_or_else(|e| panic!("{e}")), 0);
    assert!(permit.release().await.is_ok(), "release");
    let next = queued
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|e| panic!("handed the permit: {e}"));
    assert!(next.release().await.is_ok());
    let rw = locks.rw_lock("acl:prices");
    let reader = rw.read(&opts).await.unwrap_or_else(|e| panic!("read: {e}"));
    assert!(reader.release().await.is_ok());
    let writer = rw
        .write(&opts)
        .await
        .unwrap_or_else(|e| panic!("write: {e}"));
    assert!(writer.release().await.is_ok());
}

/// A permission the user lacks gives an error that names the command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_permission_names_the_command() {
    let server = restricted_server(&["-pexpire"]);
    let locks = app_manager(&server).await;
    let opts = LockOptions::new(Duration::from_secs(5)).wait(Duration::ZERO);
    let mut guard = locks
        .try_acquire("acl:nopexpire", &opts)
        .await
        .unwrap_or_else(|e| panic!("acquire: {e}"))
        .unwrap_or_else(|| panic!("the key is free"));
    let err = guard
        .extend(Duration::from_secs(10))
        .await
        .err()
        .unwrap_or_else(|| panic!("extend without +pexpire must fail"));
    assert!(matches!(err, LockError::Redis(_)), "{err:?}");
    let text = err.to_string().to_lowercase();
    assert!(
        text.contains("noperm") && text.contains("pexpire"),
        "the error names the refused command: {text}"
    );
}

/// `acquire_many`'s one-script fast path and its ordered fall-back, as the restricted user.
#[tokio::test]
async fn the_documented_rule_covers_acquire_many() {
    let server = restricted_server(&[]);
    let locks = app_manager(&server).await;
    let opts = LockOptions::new(Duration::from_secs(5)).wait(Duration::ZERO);
    let all = locks
        .acquire_many(["acl:a", "acl:b", "acl:c"], &opts)
        .await
        .unwrap_or_else(|e| panic!("fast path: {e}"));
    let held = locks
        .try_acquire("acl:d", &opts)
        .await
        .unwrap_or_else(|e| panic!("acquire: {e}"));
    let err = locks
        .acquire_many(["acl:c", "acl:d"], &opts)
        .await
        .err()
        .unwrap_or_else(|| panic!("acl:c is held"));
    assert!(err.is_contended(), "the fall-back path runs: {err:?}");
    assert!(all.release().await.is_ok());
    drop(held);
}

/// A refused command inside the bulk acquire is a `Redis` error that names it (Redis: the
/// `NOPERM` text listing the script's commands; Valkey names the command itself), and the keys
/// the script set before the refusal are cleaned up.
#[tokio::test]
async fn a_missing_permission_in_acquire_many_names_the_command() {
    let server = restricted_server(&["-incr"]);
    let locks = app_manager(&server).await;
    let opts = LockOptions::new(Duration::from_secs(30)).wait(Duration::ZERO);
    let err = locks
        .acquire_many(["acl:x", "acl:y"], &opts)
        .await
        .err()
        .unwrap_or_else(|| panic!("INCR is refused"));
    assert!(matches!(err, LockError::Redis(_)), "{err:?}");
    let text = err.to_string().to_lowercase();
    assert!(
        text.contains("incr"),
        "the error names the refused command: {text}"
    );
    let mut raw = server.connection().await;
    for key in ["lock:acl:x", "lock:acl:y"] {
        assert!(!exists(&mut raw, key).await, "{key} cleaned up");
    }
}

/// The twin of the rule test: a user without the channel rule cannot be woken, which is why
/// the wake-up channel lives under the prefix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_channel_rule_subscribing_is_refused() {
    let password = format!(">{PASSWORD}");
    let mut args = vec!["--user", "app", "on", password.as_str()];
    args.extend(RULE.iter().filter(|rule| !rule.starts_with('&')));
    let server = RedisServer::start_with_args(&args);
    let client = redis::Client::open(app_url(&server)).unwrap_or_else(|e| panic!("{e}"));
    let mut pubsub = client
        .get_async_pubsub()
        .await
        .unwrap_or_else(|e| panic!("pubsub connection: {e}"));
    let refused = pubsub.subscribe("lock:__wake__:x").await;
    assert!(
        refused.is_err(),
        "a channel outside the user's rule is refused"
    );
}

/// Without the channel rule a release that hands the lock over still succeeds: the refused
/// `PUBLISH` inside the release script is ignored (Redis does not roll a script back, so failing
/// there would report an error for a hand-over that happened), and the waiter, which cannot
/// subscribe either, finds the key holding its value at its next re-check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_channel_rule_a_hand_over_still_succeeds() {
    let password = format!(">{PASSWORD}");
    let mut args = vec!["--user", "app", "on", password.as_str()];
    args.extend(RULE.iter().filter(|rule| !rule.starts_with('&')));
    let server = RedisServer::start_with_args(&args);
    let mut raw = server.connection().await;
    let connect = || async {
        LockManager::connect(&app_url(&server))
            .await
            .unwrap_or_else(|e| panic!("connect: {e}"))
    };
    let (holder, waiter) = (connect().await, connect().await);
    let held = holder
        .acquire("acl:nochan", &LockOptions::new(Duration::from_secs(10)))
        .await
        .unwrap_or_else(|e| panic!("acquire: {e}"));
    let waiting = tokio::spawn(async move {
        let opts = LockOptions::new(Duration::from_secs(10)).wait(Duration::from_secs(5));
        waiter.acquire("acl:nochan", &opts).await
    });
    wait_queue_len(&mut raw, 1).await;
    let first = held.fencing_token();
    let released = held.release().await;
    assert!(released.is_ok(), "the hand-over happened: {released:?}");
    let got = waiting
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|e| panic!("the waiter gets the lock by its re-check: {e}"));
    assert!(got.fencing_token() > first);
    assert!(got.release().await.is_ok());
}

/// No password in `Debug` of the builder or the manager, in errors, or in log output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_password_never_appears_in_output() {
    let server = restricted_server(&[]);
    let url = app_url(&server);
    let builder = LockManager::builder().url(&url);
    let mut shown = vec![format!("{builder:?}")];
    let events = CapturedEvents::default();
    let _capture = tracing::subscriber::set_default(events.clone());
    let locks = LockManager::connect(&url)
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"));
    shown.push(format!("{locks:?}"));
    // A wrong password, and a malformed URL that carries one.
    let wrong = format!("redis://app:{PASSWORD}x@127.0.0.1:{}/", server.port());
    if let Err(e) = LockManager::connect(&wrong).await {
        shown.push(format!("{e} {e:?}"));
    }
    let malformed = format!("redis://app:{PASSWORD}@127.0.0.1:notaport/");
    match LockManager::connect(&malformed).await {
        Err(e) => shown.push(format!("{e} {e:?}")),
        Ok(_) => panic!("a malformed URL must be refused"),
    }
    let opts = LockOptions::new(Duration::from_secs(1)).wait(Duration::ZERO);
    if let Ok(Some(guard)) = locks.try_acquire("acl:quiet", &opts).await {
        shown.push(format!("{guard:?}"));
        let _ = guard.release().await;
    }
    for level in [
        tracing::Level::WARN,
        tracing::Level::INFO,
        tracing::Level::DEBUG,
    ] {
        shown.extend(events.at(level));
    }
    for text in &shown {
        assert!(
            !text.contains(PASSWORD),
            "the password leaked into output: {text}"
        );
    }
    assert!(
        shown[0].contains("app:***@"),
        "the builder shows the user with the password masked: {}",
        shown[0]
    );
}
