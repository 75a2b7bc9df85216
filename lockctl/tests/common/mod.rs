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

/// Runs `lockctl ARGS` on a blocking thread, so that the test's runtime (and the locks its
/// managers hold) keeps running meanwhile.
pub async fn lockctl(args: &[&str]) -> Run {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        let out = Command::new(env!("CARGO_BIN_EXE_lockctl"))
            .args(&args)
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
    let run = lockctl(args).await;
    assert_eq!(run.code, Some(0), "lockctl {args:?} failed: {run:?}");
    run.stdout
}

/// `lockctl --json` output, parsed.
pub async fn json(args: &[&str]) -> Vec<serde_json::Value> {
    let out = ok(args).await;
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("not a JSON array: {e}: {out}"))
}

/// Fails with exit code 1 and exactly one stderr line containing every one of `needles`.
pub async fn fails_with(args: &[&str], needles: &[&str]) -> String {
    let run = lockctl(args).await;
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
