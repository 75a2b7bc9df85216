//! Text that came from Redis (keys, holder metadata) never reaches the operator's terminal
//! as control characters: every human-readable output (`list`, `watch`, `inspect`, the
//! `release` audit line, errors) shows them as `{:?}`-style escapes, bytes that are not UTF-8
//! as `\xNN`, while `--json` keeps the text exact.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{fails_with, json, lockctl, ok, record};
use lockcore::{LockManager, LockOptions};
use lockcore_tests::RedisServer;

/// A key from request data that clears the screen and forges a table row.
const HOSTILE: &str = "\x1b[2J\x1b[H\n<fake row>\r\x07\u{202e}";
/// [`HOSTILE`] as the text outputs show it.
const HOSTILE_SHOWN: &str = "\\u{1b}[2J\\u{1b}[H\\n<fake row>\\r\\u{7}\\u{202e}";
/// A process label with an OSC sequence (sets the terminal title) and a backslash.
const LABEL: &str = "ops\x1b]0;owned\x07\\";
const LABEL_SHOWN: &str = "ops\\u{1b}]0;owned\\u{7}\\\\";

fn opts(wait_ms: u64) -> LockOptions {
    LockOptions::new(Duration::from_secs(60)).wait(Duration::from_millis(wait_ms))
}

/// No byte that a terminal acts on: C0 controls (tab and newline aside), DEL, C1 controls.
fn assert_inert(out: &str, what: &str) {
    let bad: Vec<char> = out
        .chars()
        .filter(|&c| c.is_control() && c != '\n' && c != '\t' || c == '\u{202e}')
        .collect();
    assert!(bad.is_empty(), "{what} printed {bad:?}: {out:?}");
}

async fn manager(server: &RedisServer) -> LockManager {
    LockManager::builder()
        .url(server.url())
        .process_label(LABEL)
        .build()
        .await
        .expect("manager")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_characters_are_escaped_in_text_and_exact_in_json() {
    let server = RedisServer::start();
    let url = server.url();
    let holder = manager(&server).await;
    let guard = holder.acquire(HOSTILE, &opts(0)).await.expect("acquire");
    let full = guard.key().to_owned();
    let waiter = manager(&server).await;
    let waiting = tokio::spawn(async move {
        let got = waiter.acquire(HOSTILE, &opts(30_000)).await;
        (got, waiter)
    });
    let (queue, _) = lockcore::keyspace::waiter_queue_keys("lock:", &full);
    let mut raw = server.connection().await;
    for _ in 0..500 {
        let n: usize = redis::cmd("LLEN")
            .arg(&queue)
            .query_async(&mut raw)
            .await
            .unwrap();
        if n == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let list = ok(&["--url", &url, "list"]).await;
    assert_inert(&list, "list");
    assert!(list.contains(&format!("lock:{HOSTILE_SHOWN}")), "{list}");
    assert!(list.contains(LABEL_SHOWN), "{list}");
    assert_eq!(list.lines().count(), 3, "header, one row, total: {list}");

    let records = json(&["--url", &url, "list", "--json"]).await;
    let r = record(&records, &full);
    assert_eq!(r["label"], LABEL, "--json keeps the text exact");
    assert_eq!(r["waiters"][0]["label"], LABEL);

    let detail = ok(&["--url", &url, "inspect", &full]).await;
    assert_inert(&detail, "inspect");
    assert!(detail.contains(HOSTILE_SHOWN), "{detail}");
    assert!(detail.contains(LABEL_SHOWN), "{detail}");
    let inspected = json(&["--url", &url, "inspect", &full, "--json"]).await;
    assert_eq!(inspected[0]["key"], full.as_str());

    let watch = common::watch_once(&url).await;
    assert_inert(&watch, "watch");
    assert!(watch.contains(HOSTILE_SHOWN), "{watch}");

    let missing = format!("lock:{HOSTILE}x");
    let err = fails_with(&["--url", &url, "inspect", &missing], &["no such key"]).await;
    assert_inert(&err, "an error");

    let released = ok(&["--url", &url, "release", &full, "--force"]).await;
    assert_inert(&released, "release");
    assert!(
        released.starts_with(&format!("released lock:{HOSTILE_SHOWN}:")),
        "{released}"
    );
    assert!(released.contains(LABEL_SHOWN), "{released}");
    assert_eq!(released.lines().count(), 1, "{released}");
    let (handed, _waiter) = waiting.await.unwrap();
    drop(handed);
    drop(guard);
}

/// Keys and values that are not UTF-8 (written by something else under the prefix): listed
/// with `\xNN` escapes, never a failed listing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_that_are_not_utf8_are_shown_as_escapes() {
    let server = RedisServer::start();
    let url = server.url();
    let mut raw = server.connection().await;
    let key: &[u8] = b"lock:bin\xff\x1b[2J";
    let value: &[u8] = b"tok\xfe\x1b {\"host\":\"h\"}";
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query_async(&mut raw)
        .await
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("lock:text")
        .arg(value)
        .query_async(&mut raw)
        .await
        .unwrap();

    let list = ok(&["--url", &url, "list"]).await;
    assert_inert(&list, "list");
    assert!(list.contains("lock:bin\\xff\\u{1b}[2J"), "{list}");
    assert!(list.contains("lock:text"), "{list}");
    let records = json(&["--url", &url, "list", "--json"]).await;
    assert_eq!(records.len(), 2, "{records:?}");
    let text = record(&records, "lock:text");
    assert_eq!(text["token"], "tok\u{fffd}\u{1b}", "lossy in JSON");

    let detail = ok(&["--url", &url, "inspect", "lock:text"]).await;
    assert_inert(&detail, "inspect");
    assert!(detail.contains("tok\\xfe\\u{1b}"), "{detail}");
    let run = lockctl(&["--url", &url, "release", "lock:text", "--force"]).await;
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_inert(&run.stdout, "release");
    assert!(run.stdout.contains("tok\\xfe\\u{1b}"), "{run:?}");
}
