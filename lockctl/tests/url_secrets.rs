//! A password in a URL never reaches lockctl's output, text or `--json`, on stdout or stderr:
//! swept over well-formed and malformed URL forms, every command, and `--url`, `--cluster`
//! and `--sentinel`, against a closed port and against a server that wants the password.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use common::lockctl;
use lockcore_tests::{RedisServer, free_port, secret_url_forms};
use redis::AsyncCommands;

const SECRET: &str = "S3CRETpw42";

/// Every command, with and without `--json`.
const COMMANDS: [&[&str]; 7] = [
    &["list"],
    &["list", "lock:*", "--json"],
    &["inspect", "lock:k"],
    &["inspect", "lock:k", "--json"],
    &["release", "lock:k", "--force"],
    &["release", "lock:k", "--force", "--token", "t"],
    &["watch", "--iterations", "1", "--interval", "1"],
];

/// Runs every command through every connection flag for `url` (the commands of one flag at
/// once: a TLS handshake with a plain server waits for lockctl's timeout); panics on the first
/// output that shows the secret. Returns how many runs there were.
async fn sweep(url: &str) -> usize {
    let mut runs = 0;
    let flags: [Vec<&str>; 3] = [
        vec!["--url", url],
        vec!["--cluster", url],
        vec!["--sentinel", url, "--master", "mymaster"],
    ];
    for flag in &flags {
        let mut running = Vec::new();
        for command in COMMANDS {
            let mut args: Vec<String> = flag.iter().map(|a| (*a).to_owned()).collect();
            args.extend(command.iter().map(|a| (*a).to_owned()));
            running.push(tokio::spawn(async move {
                let refs: Vec<&str> = args.iter().map(String::as_str).collect();
                let run = lockctl(&refs).await;
                (args, run)
            }));
        }
        for task in running {
            let (args, run) = task.await.expect("lockctl task");
            assert!(!run.stderr.contains("panicked"), "{args:?}: {run:?}");
            assert!(
                !run.stdout.contains(SECRET) && !run.stderr.contains(SECRET),
                "the password leaked: lockctl {args:?}: {run:?}"
            );
            runs += 1;
        }
    }
    runs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_url_form_shows_the_password_on_a_closed_port() {
    let port = free_port();
    let mut runs = 0;
    for url in secret_url_forms(SECRET, port) {
        runs += sweep(&url).await;
    }
    assert!(runs > 300, "{runs} runs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_url_form_shows_the_password_to_a_server_that_wants_it() {
    let server = RedisServer::start_with_args(&["--requirepass", SECRET]);
    let good = format!("redis://:{SECRET}@127.0.0.1:{}/", server.port());
    let client = redis::Client::open(good.as_str()).expect("client");
    let mut raw = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    // A lock to list, inspect and release.
    let _: () = raw
        .set("lock:k", "2b1f0c7e-5d3a-4c2e-9a63-0e8f0f3a9b41 {\"pid\":1}")
        .await
        .expect("SET");
    for url in secret_url_forms(SECRET, server.port()) {
        sweep(&url).await;
    }
    let _: () = raw
        .set("lock:k", "2b1f0c7e-5d3a-4c2e-9a63-0e8f0f3a9b41 {\"pid\":1}")
        .await
        .expect("SET");
    let listed = lockctl(&["--url", &good, "list", "--json"]).await;
    assert_eq!(listed.code, Some(0), "{listed:?}");
    assert!(listed.stdout.contains("lock:k"), "{listed:?}");
    assert!(!listed.stdout.contains(SECRET), "{listed:?}");
}
