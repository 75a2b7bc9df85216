//! Connection settings lockctl refuses before it dials anything: `rediss://..#insecure` (no
//! certificate check), and `--sentinel` URLs that mix `redis://` and `rediss://` (the
//! password would reach a sentinel or the primary in plain text).

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use common::fails_with;
use lockcore_tests::{FakeRedis, free_port};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insecure_tls_is_refused() {
    let url = format!("rediss://127.0.0.1:{}/#insecure", free_port());
    for flag in ["--url", "--cluster"] {
        fails_with(&[flag, &url, "list"], &["bad URL", "#insecure"]).await;
    }
    fails_with(
        &["--sentinel", &url, "--master", "m", "list"],
        &["bad URL", "#insecure"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_urls_with_mixed_schemes_are_refused_before_any_connection() {
    let (plain, tls) = (FakeRedis::refusing().await, FakeRedis::silent().await);
    let mixed = format!(
        "redis://ops:S3CRETpw42@127.0.0.1:{},rediss://ops:S3CRETpw42@127.0.0.1:{}",
        plain.port(),
        tls.port()
    );
    let err = fails_with(
        &["--sentinel", &mixed, "--master", "m", "list"],
        &["redis://", "rediss://"],
    )
    .await;
    assert!(!err.contains("S3CRETpw42"), "{err}");
    let sent = String::from_utf8_lossy(&plain.received()).into_owned();
    assert!(
        !sent.contains("S3CRETpw42"),
        "the password went out in plain text: {sent:?}"
    );
    assert_eq!(plain.connections() + tls.connections(), 0);
}
