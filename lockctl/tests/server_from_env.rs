//! Without `--url`, `--cluster` or `--sentinel`, `lockctl` reads its server from `LOCKCTL_URL`,
//! then `REDIS_URL`, so that a password need not be on the command line; a flag always wins,
//! `--help` says which variable a run would use, and no password is ever printed.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{fails_with_env, json_with_env, lockctl_with_env, ok_with_env};
use lockcore::{LockGuard, LockManager, LockOptions};
use lockcore_tests::RedisServer;

/// A server holding one lock, `lock:<name>`.
async fn server_holding(name: &str) -> (RedisServer, LockManager, LockGuard) {
    let server = RedisServer::start();
    let locks = LockManager::connect(&server.url())
        .await
        .unwrap_or_else(|e| panic!("connect: {e}\n{}", server.log()));
    let opts = LockOptions::new(Duration::from_secs(60)).wait(Duration::ZERO);
    let guard = locks.acquire(name, &opts).await.expect("acquire");
    (server, locks, guard)
}

/// The keys `list --json` printed.
async fn listed(args: &[&str], env: &[(&str, &str)]) -> Vec<String> {
    json_with_env(args, env)
        .await
        .iter()
        .filter_map(|r| r["key"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockctl_url_then_redis_url_then_the_flag_wins() {
    let (a, _la, _ga) = server_holding("on-a").await;
    let (b, _lb, _gb) = server_holding("on-b").await;
    let (url_a, url_b) = (a.url(), b.url());
    let list = ["list", "--json"];

    let both = [
        ("LOCKCTL_URL", url_a.as_str()),
        ("REDIS_URL", url_b.as_str()),
    ];
    assert_eq!(
        listed(&list, &both).await,
        ["lock:on-a"],
        "LOCKCTL_URL first"
    );
    let only_redis = [("REDIS_URL", url_b.as_str())];
    assert_eq!(
        listed(&list, &only_redis).await,
        ["lock:on-b"],
        "then REDIS_URL"
    );
    let empty = [("LOCKCTL_URL", ""), ("REDIS_URL", url_b.as_str())];
    assert_eq!(
        listed(&list, &empty).await,
        ["lock:on-b"],
        "an empty LOCKCTL_URL counts as unset"
    );
    let flag = ["--url", url_b.as_str(), "list", "--json"];
    assert_eq!(
        listed(&flag, &both).await,
        ["lock:on-b"],
        "`--url` wins over both variables"
    );
    // The twin: no flag and no variable is still the one-line error, now naming the variables.
    fails_with_env(
        &["list"],
        &[],
        &["expected one of `--url URL`", "LOCKCTL_URL", "REDIS_URL"],
    )
    .await;
    // Every command takes the variable: inspect too.
    let detail = ok_with_env(&["inspect", "lock:on-a"], &both).await;
    assert!(detail.contains("lock:on-a"), "{detail}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_in_the_variable_works_and_is_never_printed() {
    let server = RedisServer::start_with_acl(&[("ops", "s3cret-pw", "on ~* &* +@all")]);
    let good = server.url_for_user("ops", "s3cret-pw");
    let bad = server.url_for_user("ops", "wrong-pw");
    let records = json_with_env(&["list", "--json"], &[("LOCKCTL_URL", &good)]).await;
    assert!(records.is_empty(), "{records:?}");

    let err = fails_with_env(
        &["list"],
        &[("LOCKCTL_URL", &bad)],
        &["cannot connect", "***", "from `LOCKCTL_URL`"],
    )
    .await;
    assert!(!err.contains("wrong-pw"), "{err}");
    let err = fails_with_env(
        &["list"],
        &[("REDIS_URL", &bad)],
        &["cannot connect", "from `REDIS_URL`"],
    )
    .await;
    assert!(!err.contains("wrong-pw"), "{err}");
    let err = fails_with_env(
        &["list"],
        &[("REDIS_URL", "not a url at all")],
        &["bad URL", "from `REDIS_URL`"],
    )
    .await;
    assert!(err.contains("not a url at all"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn help_says_which_variable_a_run_would_use() {
    let secret = "redis://ops:s3cret-pw@127.0.0.1:1/";
    let run = lockctl_with_env(&["--help"], &[]).await;
    assert_eq!(run.code, Some(0), "{run:?}");
    assert!(
        run.stdout.contains("LOCKCTL_URL") && run.stdout.contains("REDIS_URL"),
        "--help names both variables: {}",
        run.stdout
    );
    assert!(
        run.stdout.contains("neither is set"),
        "--help says none is set: {}",
        run.stdout
    );

    let run = lockctl_with_env(&["--help"], &[("REDIS_URL", secret)]).await;
    assert!(
        run.stdout
            .contains("uses `REDIS_URL` (redis://ops:***@127.0.0.1:1/)"),
        "{}",
        run.stdout
    );
    assert!(!run.stdout.contains("s3cret"), "{}", run.stdout);
    let run = lockctl_with_env(
        &["--help"],
        &[("REDIS_URL", secret), ("LOCKCTL_URL", secret)],
    )
    .await;
    assert!(run.stdout.contains("uses `LOCKCTL_URL`"), "{}", run.stdout);
    assert!(!run.stdout.contains("s3cret"), "{}", run.stdout);
}
