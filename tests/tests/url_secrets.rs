//! A password in a Redis URL never reaches any output: the builder's `Debug` (every topology),
//! the build error's `Display` and `Debug`, a manager's `Debug`, later call errors, and every
//! `tracing` event down to TRACE. Swept over well-formed and malformed URL forms and over the
//! ways a build fails (malformed, unreachable, refused password).

use std::time::Duration;

use lockcore::{LockManager, LockManagerBuilder, LockOptions};
use lockcore_tests::*;

const SECRET: &str = "S3CRETpw42";

/// Every form of URL carrying [`SECRET`], with `port` where a port goes.
fn forms(port: u16) -> Vec<String> {
    secret_url_forms(SECRET, port)
}

/// The builder of each topology over `url`.
fn topologies(url: &str) -> Vec<LockManagerBuilder> {
    let fast = |b: LockManagerBuilder| {
        b.connection_timeout(Duration::from_millis(200))
            .response_timeout(Duration::from_millis(200))
    };
    vec![
        fast(LockManager::builder().url(url)),
        fast(LockManager::builder().nodes([url, url, url])),
        fast(LockManager::builder().cluster([url])),
        fast(LockManager::builder().sentinel([url], "mymaster")),
    ]
}

/// Everything a caller can print while building and using a manager from `builder`.
async fn outputs_of(builder: LockManagerBuilder) -> Vec<String> {
    let mut shown = vec![format!("{builder:?}")];
    match builder.build().await {
        Err(e) => shown.push(format!("{e} {e:?}")),
        Ok(manager) => {
            shown.push(format!("{manager:?}"));
            let opts = LockOptions::new(Duration::from_secs(1)).wait(Duration::ZERO);
            match manager.try_acquire("secrets", &opts).await {
                Err(e) => shown.push(format!("{e} {e:?}")),
                Ok(Some(guard)) => {
                    shown.push(format!("{guard:?}"));
                    let _ = guard.release().await;
                }
                Ok(None) => {}
            }
        }
    }
    shown
}

/// Every captured event, TRACE to ERROR.
fn every_event(events: &CapturedEvents) -> Vec<String> {
    [
        tracing::Level::TRACE,
        tracing::Level::DEBUG,
        tracing::Level::INFO,
        tracing::Level::WARN,
        tracing::Level::ERROR,
    ]
    .into_iter()
    .flat_map(|level| events.at(level))
    .collect()
}

fn assert_no_secret(shown: &[String], what: &str) {
    for text in shown {
        assert!(
            !text.contains(SECRET),
            "the password leaked ({what}): {text}"
        );
    }
}

/// Malformed and unreachable URLs of every form, through `url`, `nodes`, `cluster` and
/// `sentinel`.
#[test]
fn no_url_form_or_topology_shows_the_password() {
    let closed = free_port();
    let events = CapturedEvents::default();
    let runtime = current_thread_runtime();
    tracing::subscriber::with_default(events.clone(), || {
        runtime.block_on(async {
            for url in forms(closed) {
                for builder in topologies(&url) {
                    let shown = outputs_of(builder).await;
                    assert_no_secret(&shown, &format!("{url:?}"));
                }
            }
        });
    });
    assert_no_secret(&every_event(&events), "tracing");
}

/// A real server that refuses the password, and one that accepts it: the manager, its
/// errors and its logs never show it.
#[test]
fn a_refused_or_accepted_password_is_never_shown() {
    let server = RedisServer::start_with_args(&["--requirepass", SECRET]);
    let events = CapturedEvents::default();
    let runtime = current_thread_runtime();
    tracing::subscriber::with_default(events.clone(), || {
        runtime.block_on(async {
            for url in forms(server.port()) {
                for builder in topologies(&url) {
                    assert_no_secret(&outputs_of(builder).await, &format!("{url:?}"));
                }
            }
            let good = format!("redis://:{SECRET}@127.0.0.1:{}/", server.port());
            let shown = outputs_of(LockManager::builder().url(&good)).await;
            assert!(
                shown.iter().any(|s| s.contains("LockGuard")),
                "the good URL connects: {shown:?}"
            );
            assert_no_secret(&shown, "a good URL");
        });
    });
    let logged = every_event(&events);
    assert!(!logged.is_empty(), "the capture saw the manager's events");
    assert_no_secret(&logged, "tracing");
}
