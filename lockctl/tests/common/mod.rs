//! Runs the `lockctl` binary and checks the one-line error contract.
#![allow(dead_code, unreachable_pub)]

use std::process::Command;

/// What one `lockctl` run printed.
#[derive(Debug)]
pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// The environment variables `lockctl` reads its server from when no flag names one.
pub const URL_VARS: [&str; 2] = ["LOCKCTL_URL", "REDIS_URL"];

/// Runs `lockctl ARGS` on a blocking thread, so that the test's runtime (and the locks its
/// managers hold) keeps running meanwhile. [`URL_VARS`] are removed from its environment, so
/// that a `REDIS_URL` of the machine never picks its server.
pub async fn lockctl(args: &[&str]) -> Run {
    lockctl_with_env(args, &[]).await
}

/// As [`lockctl`], with `env` set (after [`URL_VARS`] are removed).
pub async fn lockctl_with_env(args: &[&str], env: &[(&str, &str)]) -> Run {
    lockctl_env(args, env, &[]).await
}

/// As [`lockctl_with_env`], with the variables `removed` unset too.
pub async fn lockctl_env(args: &[&str], env: &[(&str, &str)], removed: &[&str]) -> Run {
    let removed: Vec<String> = removed.iter().map(|v| (*v).to_owned()).collect();
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    tokio::task::spawn_blocking(move || {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_lockctl"));
        for var in URL_VARS
            .iter()
            .copied()
            .chain(removed.iter().map(String::as_str))
        {
            cmd.env_remove(var);
        }
        let out = cmd
            .args(&args)
            .envs(env)
            .output()
            .unwrap_or_else(|e| panic!("cannot run lockctl: {e}"));
        Run {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    })
    .await
    .unwrap_or_else(|e| panic!("lockctl runner: {e}"))
}

/// A successful run's stdout.
pub async fn ok(args: &[&str]) -> String {
    ok_with_env(args, &[]).await
}

/// As [`ok`], with `env` set.
pub async fn ok_with_env(args: &[&str], env: &[(&str, &str)]) -> String {
    let run = lockctl_with_env(args, env).await;
    assert_eq!(
        run.code,
        Some(0),
        "lockctl {args:?} {env:?} failed: {run:?}"
    );
    run.stdout
}

/// One `watch` refresh of the default pattern on `url`.
pub async fn watch_once(url: &str) -> String {
    ok(&[
        "--url",
        url,
        "watch",
        "--iterations",
        "1",
        "--interval",
        "1",
    ])
    .await
}

/// `lockctl --json` output, parsed.
pub async fn json(args: &[&str]) -> Vec<serde_json::Value> {
    json_with_env(args, &[]).await
}

/// As [`json`], with `env` set.
pub async fn json_with_env(args: &[&str], env: &[(&str, &str)]) -> Vec<serde_json::Value> {
    let out = ok_with_env(args, env).await;
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("not a JSON array: {e}: {out}"))
}

/// Fails with exit code 1 and exactly one stderr line containing every one of `needles`.
pub async fn fails_with(args: &[&str], needles: &[&str]) -> String {
    fails_with_env(args, &[], needles).await
}

/// As [`fails_with`], with `env` set.
pub async fn fails_with_env(args: &[&str], env: &[(&str, &str)], needles: &[&str]) -> String {
    let run = lockctl_with_env(args, env).await;
    assert_eq!(run.code, Some(1), "lockctl {args:?}: {run:?}");
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one stderr line expected: {run:?}");
    assert!(lines[0].starts_with("lockctl: "), "{run:?}");
    assert!(!run.stderr.contains("panicked"), "{run:?}");
    for needle in needles {
        assert!(lines[0].contains(needle), "`{needle}` missing: {run:?}");
    }
    run.stderr
}

/// The record of `key` in a `--json` listing.
pub fn record<'a>(records: &'a [serde_json::Value], key: &str) -> &'a serde_json::Value {
    records
        .iter()
        .find(|r| r["key"] == key)
        .unwrap_or_else(|| panic!("{key} not listed: {records:?}"))
}
