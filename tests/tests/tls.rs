//! lockcore over `rediss://` (cargo feature `tls`) against a TLS server with a CA made in the
//! test: the private CA, mTLS, an ACL user over TLS, and the failures without them.

use std::time::Duration;

use lockcore::{LockError, LockManager, LockOptions};
use lockcore_tests::TlsServer;

fn once() -> LockOptions {
    LockOptions::new(Duration::from_secs(5)).wait(Duration::ZERO)
}

async fn lock_cycle(locks: &LockManager, key: &str) {
    let guard = locks
        .try_acquire(key, &once())
        .await
        .unwrap_or_else(|e| panic!("acquire over TLS: {e}"))
        .unwrap_or_else(|| panic!("free"));
    assert!(guard.release().await.is_ok(), "release over TLS");
}

/// With the test CA trusted, the lock works over TLS, hand-off (pub/sub over TLS) included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_with_the_private_ca() {
    let server = TlsServer::start();
    for url in [server.url(), server.localhost_url()] {
        let locks = LockManager::builder()
            .url(&url)
            .tls_root_ca_pem(server.ca_pem())
            .build()
            .await
            .unwrap_or_else(|e| panic!("connect {url}: {e}\n{}", server.log()));
        lock_cycle(&locks, "tls:cycle").await;
        let guard = locks
            .try_acquire("tls:handoff", &once())
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| panic!("free"));
        let waiter = locks.clone();
        let waiting = tokio::spawn(async move {
            let opts = LockOptions::new(Duration::from_secs(5)).wait(Duration::from_secs(5));
            waiter.acquire("tls:handoff", &opts).await
        });
        tokio::task::yield_now().await;
        assert!(guard.release().await.is_ok());
        let handed = waiting
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|e| panic!("waiter over TLS: {e}"));
        assert!(handed.release().await.is_ok());
    }
}

/// Without the CA the server's certificate is not trusted: a `Redis` error, no panic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_without_the_ca_is_refused() {
    let server = TlsServer::start();
    let built = LockManager::builder()
        .url(server.url())
        .connection_timeout(Duration::from_secs(2))
        .build()
        .await;
    assert!(
        matches!(built, Err(LockError::Redis(_))),
        "an untrusted certificate must fail the connection: {built:?}"
    );
}

/// A server that requires client certificates: refused without one, accepted with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_needs_the_client_certificate() {
    let server = TlsServer::start_mtls();
    let without = LockManager::builder()
        .url(server.url())
        .tls_root_ca_pem(server.ca_pem())
        .build()
        .await;
    assert!(without.is_err(), "no client certificate: {without:?}");
    let locks = LockManager::builder()
        .url(server.url())
        .tls_root_ca_pem(server.ca_pem())
        .tls_client_cert_pem(server.client_cert_pem(), server.client_key_pem())
        .build()
        .await
        .unwrap_or_else(|e| panic!("mTLS: {e}\n{}", server.log()));
    lock_cycle(&locks, "mtls").await;
}

/// `rediss://user:password@host:port/` with an ACL user limited to the prefix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_with_an_acl_user() {
    let server = TlsServer::start_with(
        false,
        &[("app", "tls-secret", "on >tls-secret ~lock:* &lock:* +@all")],
    );
    let locks = LockManager::builder()
        .url(server.url_for_user("app", "tls-secret"))
        .tls_root_ca_pem(server.ca_pem())
        .build()
        .await
        .unwrap_or_else(|e| panic!("ACL user over TLS: {e}\n{}", server.log()));
    lock_cycle(&locks, "acl-over-tls").await;
    let wrong = LockManager::builder()
        .url(server.url_for_user("app", "wrong"))
        .tls_root_ca_pem(server.ca_pem())
        .build()
        .await;
    match wrong {
        Err(e) => assert!(!format!("{e:?}").contains("tls-secret")),
        Ok(_) => panic!("a wrong password must be refused"),
    }
}
