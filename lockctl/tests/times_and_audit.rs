//! Human output shows times as local RFC 3339 with an age (`2025-12-01T09:00:00Z, 3.1 s ago`),
//! `--json` keeps the raw milliseconds, and the `release` audit line names the operator as
//! `released by <user>@<host>` from the OS, whatever the environment says.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{json_with_env, lockctl_env, ok_with_env};
use lockcore::{LockManager, LockOptions};
use lockcore_tests::RedisServer;
use redis::AsyncCommands;

/// 2025-12-01T09:00:00Z, in ms since the Unix epoch.
const PLANTED_MS: u64 = 1_764_579_600_000;
const UTC: (&str, &str) = ("TZ", "UTC0");
/// A POSIX TZ rule: UTC+05:30, no daylight saving time.
const PLUS_0530: (&str, &str) = ("TZ", "IST-5:30");

/// A lock value as lockcore writes it, acquired at [`PLANTED_MS`].
fn planted_value() -> String {
    format!(
        "00000000-0000-4000-8000-000000000001 {{\"host\":\"web-3\",\"pid\":7,\"acquired_at\":{PLANTED_MS}}}"
    )
}

/// The value of `field` in an `inspect` table (`field  value`).
fn field<'a>(detail: &'a str, field: &str) -> &'a str {
    detail
        .lines()
        .find_map(|line| {
            let rest = line.strip_prefix(field)?;
            rest.starts_with(' ').then(|| rest.trim())
        })
        .unwrap_or_else(|| panic!("no `{field}` line: {detail}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn times_are_local_rfc3339_with_an_age_and_raw_ms_in_json() {
    let server = RedisServer::start();
    let url = server.url();
    let mut raw = server.connection().await;
    let _: () = raw.set("lock:planted", planted_value()).await.unwrap();
    let (record_key, _) = lockcore::keyspace::idempotency_keys("lock:", "req:1");
    let stored = format!("{{\"v\":1,\"at_ms\":{PLANTED_MS},\"value\":1}}");
    let _: () = raw.set(&record_key, stored).await.unwrap();

    let inspect = ["--url", url.as_str(), "inspect", "lock:planted"];
    let detail = ok_with_env(&inspect, &[UTC]).await;
    let at = field(&detail, "acquired_at");
    assert!(
        at.starts_with("2025-12-01T09:00:00Z, ") && at.ends_with(" ago"),
        "local RFC 3339 and an age: {detail}"
    );
    let detail = ok_with_env(&inspect, &[PLUS_0530]).await;
    assert!(
        field(&detail, "acquired_at").starts_with("2025-12-01T14:30:00+05:30, "),
        "in the local time zone: {detail}"
    );

    let table = ok_with_env(&["--url", &url, "list"], &[UTC]).await;
    assert!(table.contains("2025-12-01T09:00:00Z, "), "{table}");
    let idem = ok_with_env(&["--url", &url, "inspect", &record_key], &[PLUS_0530]).await;
    assert!(
        field(&idem, "written_at").starts_with("2025-12-01T14:30:00+05:30, "),
        "{idem}"
    );

    let records = json_with_env(&["--url", &url, "list", "--json"], &[PLUS_0530]).await;
    let lock = common::record(&records, "lock:planted");
    assert_eq!(lock["acquired_at"], PLANTED_MS, "raw ms in --json: {lock}");
    assert!(lock["held_ms"].as_u64() > Some(0), "{lock}");
    let record = common::record(&records, &record_key);
    assert_eq!(record["written_at"], PLANTED_MS, "{record}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_just_taken_reads_as_seconds_ago() {
    let server = RedisServer::start();
    let url = server.url();
    let locks = LockManager::connect(&url).await.expect("connect");
    let guard = locks
        .acquire("fresh", &LockOptions::new(Duration::from_secs(60)))
        .await
        .expect("acquire");
    let detail = ok_with_env(&["--url", &url, "inspect", "lock:fresh"], &[UTC]).await;
    let at = field(&detail, "acquired_at");
    let (time, age) = at.split_once(", ").expect("`<time>, <age>`");
    assert!(
        time.len() == "2026-12-01T19:02:11Z".len() && time.ends_with('Z'),
        "{detail}"
    );
    assert!(
        age.ends_with(" ms ago") || age.ends_with(" s ago"),
        "a lock taken a moment ago: {detail}"
    );
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_line_names_the_os_user_and_host_with_rfc3339_times() {
    let server = RedisServer::start();
    let url = server.url();
    let mut raw = server.connection().await;
    let _: () = raw.set("lock:stuck", planted_value()).await.unwrap();
    let user = whoami::username().expect("the test's OS user");
    let host = gethostname::gethostname().to_string_lossy().into_owned();

    // As a trial ran it: no `USER` or `LOGNAME` in the environment (a container, cron, CI).
    let run = lockctl_env(
        &["--url", &url, "release", "lock:stuck", "--force"],
        &[UTC],
        &["USER", "LOGNAME"],
    )
    .await;
    assert_eq!(run.code, Some(0), "{run:?}");
    let line = run.stdout.trim_end();
    assert_eq!(run.stdout.lines().count(), 1, "{run:?}");
    assert!(
        line.contains(&format!("released by {user}@{host} (pid ")),
        "the operator from the OS: {line}"
    );
    assert!(!line.contains("?@"), "{line}");
    assert!(
        line.contains("acquired 2025-12-01T09:00:00Z, "),
        "the holder's acquire time, local RFC 3339: {line}"
    );
    let released_at = line.rsplit(" at ").next().expect("` at <time>`");
    assert!(
        released_at.len() == "2026-12-01T19:02:11Z".len() && released_at.ends_with('Z'),
        "{line}"
    );

    // A `USER` that lies is not believed either: the name comes from the OS account.
    let _: () = raw.set("lock:stuck", planted_value()).await.unwrap();
    let run = lockctl_env(
        &["--url", &url, "release", "lock:stuck", "--force"],
        &[UTC, ("USER", "somebody-else")],
        &[],
    )
    .await;
    assert!(
        run.stdout.contains(&format!("released by {user}@{host}")),
        "{run:?}"
    );
}
