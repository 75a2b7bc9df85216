//! A key rendered from request data may hold control characters. lockcore keeps it byte for
//! byte in Redis and in the error's `key` field, but its own messages (`Display` of every
//! error that names a key) and its `tracing` span and event fields show it with `{:?}`-style
//! escapes, so that a log viewer or terminal never acts on it.

use std::time::Duration;

use lockcore::{LockError, LockOptions};
use lockcore_tests::*;

/// Clears the screen, homes the cursor, forges a line, flips the text direction.
const HOSTILE: &str = "\x1b[2J\x1b[H\n<fake line>\u{202e}";
/// [`HOSTILE`] as messages show it.
const SHOWN: &str = "\\u{1b}[2J\\u{1b}[H\\n<fake line>\\u{202e}";

/// No character a terminal acts on.
fn assert_inert(text: &str, what: &str) {
    let bad: Vec<char> = text
        .chars()
        .filter(|&c| c.is_control() || c == '\u{202e}')
        .collect();
    assert!(bad.is_empty(), "{what} holds {bad:?}: {text:?}");
}

#[test]
fn keys_are_escaped_in_error_messages_spans_and_events() {
    let server = RedisServer::start();
    let events = CapturedEvents::default();
    let runtime = current_thread_runtime();
    let full = format!("lock:{HOSTILE}");
    tracing::subscriber::with_default(events.clone(), || {
        runtime.block_on(async {
            let m = manager(&server).await;
            let mut raw = server.connection().await;
            let guard = must_acquire(&m, HOSTILE, &opts(10_000, 0)).await;
            assert_eq!(guard.key(), full, "the key itself is kept byte for byte");

            let contended = m.acquire(HOSTILE, &opts(10_000, 30)).await;
            let Err(err @ LockError::Contended { .. }) = &contended else {
                panic!("expected Contended: {contended:?}");
            };
            let LockError::Contended { key, .. } = err else {
                unreachable!()
            };
            assert_eq!(key, &full, "the `key` field stays raw");
            let message = err.to_string();
            assert_inert(&message, "Contended");
            assert!(message.contains(SHOWN), "{message}");

            del(&mut raw, &full).await;
            let lost = guard.release().await;
            let Err(err @ LockError::Lost { key }) = &lost else {
                panic!("expected Lost: {lost:?}");
            };
            assert_eq!(key, &full);
            assert_inert(&err.to_string(), "Lost");

            for reserved in [
                format!("__fencing_counter__{HOSTILE}"),
                format!("{HOSTILE}__waitq__"),
            ] {
                match m.try_acquire(&reserved, &opts(10_000, 0)).await {
                    Err(err @ LockError::InvalidKey { .. }) => {
                        let message = err.to_string();
                        assert_inert(&message, "InvalidKey");
                        assert!(message.contains(SHOWN), "{message}");
                    }
                    other => panic!("a reserved name is refused: {other:?}"),
                }
            }

            // A lease the watchdog finds gone: the loss is logged with the key.
            let watched = LockOptions::new(Duration::from_millis(300)).watchdog(true);
            let guard = must_acquire(&m, HOSTILE, &watched).await;
            del(&mut raw, &full).await;
            tokio::time::timeout(Duration::from_secs(3), guard.lost())
                .await
                .unwrap_or_else(|_| panic!("the watchdog saw the key gone"));
            drop(guard);
        });
    });
    let spans = events.spans();
    assert!(
        spans
            .iter()
            .any(|s| s.starts_with("lock.acquire") && s.contains(SHOWN)),
        "the acquire span names the key, escaped: {spans:?}"
    );
    for span in &spans {
        assert_inert(span, "a span");
    }
    let warnings = events.at(tracing::Level::WARN);
    assert!(
        warnings.iter().any(|w| w.contains(SHOWN)),
        "the loss is logged with the key: {warnings:?}"
    );
    for level in [
        tracing::Level::TRACE,
        tracing::Level::DEBUG,
        tracing::Level::INFO,
        tracing::Level::WARN,
        tracing::Level::ERROR,
    ] {
        for event in events.at(level) {
            assert_inert(&event, "an event");
        }
    }
}
