//! TLS settings that could weaken a connection from outside are refused by lockcore itself:
//! `rediss://..#insecure` (whatever redis-rs features another crate turns on), Sentinel URLs
//! that mix `redis://` and `rediss://` (the credentials would go out in plain text), and PEM
//! material that holds no usable certificate (every handshake would fail later).
//!
//! This test crate enables redis-rs' `tls-rustls-insecure`, as any crate in an application's
//! graph could: the twin shows what `#insecure` then does without lockcore's refusal.

use std::time::Duration;

use lockcore::{LockError, LockManager, LockManagerBuilder};
use lockcore_tests::*;

fn refused(built: Result<LockManager, LockError>, needles: &[&str], what: &str) {
    match built {
        Err(LockError::InvalidOptions { reason }) => {
            for needle in needles {
                assert!(
                    reason.contains(needle),
                    "{what}: `{needle}` missing: {reason}"
                );
            }
        }
        other => panic!("{what}: expected InvalidOptions, got {other:?}"),
    }
}

fn quick(builder: LockManagerBuilder) -> LockManagerBuilder {
    builder
        .connection_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_millis(500))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insecure_fragment_is_refused_for_every_topology() {
    let server = TlsServer::start();
    let insecure = format!("{}#insecure", server.url());
    let builders = [
        LockManager::builder().url(&insecure),
        LockManager::builder().nodes([insecure.as_str(), insecure.as_str(), insecure.as_str()]),
        LockManager::builder().cluster([&insecure]),
        LockManager::builder().sentinel([&insecure], "mymaster"),
    ];
    for builder in builders {
        let what = format!("{builder:?}");
        // With the CA and without: `#insecure` is refused either way, before any connection.
        refused(
            quick(builder.clone()).build().await,
            &["#insecure", "certificate"],
            &what,
        );
        refused(
            quick(builder.tls_root_ca_pem(server.ca_pem()))
                .build()
                .await,
            &["#insecure"],
            &what,
        );
    }
}

/// Twin: with `tls-rustls-insecure` on, redis-rs itself honours `#insecure` and talks to a
/// server whose certificate nobody trusts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twin_redis_rs_with_the_insecure_feature_skips_certificate_checks() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let server = TlsServer::start();
    let insecure = format!("{}#insecure", server.url());
    let client = redis::Client::open(insecure.as_str()).unwrap_or_else(|e| panic!("{e}"));
    let mut con = client
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("no certificate check, so this connects: {e}"));
    let pong: String = redis::cmd("PING")
        .query_async(&mut con)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(pong, "PONG");
}

/// A `redis://` sentinel followed by `rediss://` ones: refused before anything is sent, so
/// the password never travels in plain text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_urls_with_mixed_schemes_are_refused_before_any_connection() {
    let (plain, tls) = (FakeRedis::refusing().await, FakeRedis::silent().await);
    for sentinels in [
        vec![
            format!("redis://app:S3CRETpw42@127.0.0.1:{}/", plain.port()),
            format!("rediss://app:S3CRETpw42@127.0.0.1:{}/", tls.port()),
        ],
        vec![
            format!("rediss://app:S3CRETpw42@127.0.0.1:{}/", tls.port()),
            format!("redis://app:S3CRETpw42@127.0.0.1:{}/", plain.port()),
        ],
    ] {
        let built = quick(LockManager::builder().sentinel(&sentinels, "mymaster"))
            .build()
            .await;
        let sent = String::from_utf8_lossy(&plain.received()).into_owned();
        assert!(
            !sent.contains("S3CRETpw42"),
            "the password went out in plain text: {sent:?}"
        );
        refused(
            built,
            &["redis://", "rediss://", "sentinel"],
            "mixed schemes",
        );
    }
    assert_eq!(
        plain.connections() + tls.connections(),
        0,
        "nothing was dialled"
    );
    // Different credentials in two sentinel URLs are refused as well: only one set is used.
    let different = [
        format!("redis://app:one@127.0.0.1:{}/", plain.port()),
        format!("redis://app:two@127.0.0.1:{}/", plain.port()),
    ];
    refused(
        quick(LockManager::builder().sentinel(different, "mymaster"))
            .build()
            .await,
        &["credentials"],
        "different credentials",
    );
}

/// PEM that holds no certificate, or one that does not parse: refused by `build()`, for a
/// `redis://` URL too (the material is checked, not left to a later handshake).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ca_pem_without_a_certificate_is_refused_at_build() {
    let tls = TlsServer::start();
    let plain = RedisServer::start();
    let bogus_block = b"-----BEGIN CERTIFICATE-----\nZm9vYmFy\n-----END CERTIFICATE-----\n";
    for url in [tls.url(), plain.url()] {
        for (pem, needle) in [
            (b"".to_vec(), "holds no certificate"),
            (b"garbage, not PEM".to_vec(), "holds no certificate"),
            (tls.client_key_pem(), "holds no certificate"),
            (bogus_block.to_vec(), "not a valid certificate"),
        ] {
            let built = quick(LockManager::builder().url(&url).tls_root_ca_pem(pem))
                .build()
                .await;
            refused(built, &["tls_root_ca_pem", needle], &url);
        }
        let built = quick(
            LockManager::builder()
                .url(&url)
                .tls_root_ca_pem(tls.ca_pem())
                .tls_client_cert_pem(b"junk".to_vec(), tls.client_key_pem()),
        )
        .build()
        .await;
        refused(
            built,
            &["tls_client_cert_pem", "holds no certificate"],
            &url,
        );
        let built = quick(
            LockManager::builder()
                .url(&url)
                .tls_root_ca_pem(tls.ca_pem())
                .tls_client_cert_pem(tls.client_cert_pem(), b"junk".to_vec()),
        )
        .build()
        .await;
        refused(
            built,
            &["tls_client_cert_pem", "holds no private key"],
            &url,
        );
    }
    // The real CA is accepted.
    let built = LockManager::builder()
        .url(tls.url())
        .tls_root_ca_pem(tls.ca_pem())
        .build()
        .await;
    assert!(built.is_ok(), "{built:?}\n{}", tls.log());
}
