//! `TlsServer`: redis-rs over rustls with the test CA, without it, mTLS, and
//! an ACL user over `rediss://`.

use lockcore_tests::TlsServer;
use redis::{ClientTlsConfig, TlsCertificates};

/// What ran: the TLS server may run on `redis-server` when the flavour's
/// binary has no TLS (see `TlsServer`).
fn announce_tls(what: &str, server: &TlsServer) {
    eprintln!(
        "{what} on {} {} (LOCKCORE_TEST_SERVER picks {})",
        server.flavour(),
        server.flavour().version(),
        lockcore_tests::server_flavour()
    );
}

/// redis 1.x enables rustls without a crypto provider: the first TLS connect
/// panics ("Could not automatically determine the process-level
/// CryptoProvider") unless one is installed. Installing twice is an `Err`
/// we can ignore (another test got there first).
fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

fn tls_client(url: &str, ca: Option<Vec<u8>>, client_cert: Option<&TlsServer>) -> redis::Client {
    install_crypto_provider();
    let certs = TlsCertificates {
        client_tls: client_cert.map(|server| ClientTlsConfig {
            client_cert: server.client_cert_pem(),
            client_key: server.client_key_pem(),
        }),
        root_cert: ca,
    };
    redis::Client::build_with_tls(url, certs).expect("TLS client")
}

async fn ping(client: &redis::Client) -> redis::RedisResult<String> {
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(std::time::Duration::from_secs(5)))
        .set_response_timeout(Some(std::time::Duration::from_secs(5)));
    let mut con = client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    redis::cmd("PING").query_async(&mut con).await
}

#[tokio::test]
async fn tls_connects_with_the_test_ca_by_ip_and_by_name() {
    let server = TlsServer::start();
    announce_tls("tls", &server);
    assert!(server.url().starts_with("rediss://127.0.0.1:"));
    for url in [server.url(), server.localhost_url()] {
        let client = tls_client(&url, Some(server.ca_pem()), None);
        let pong = ping(&client).await;
        assert_eq!(
            pong.as_deref().ok(),
            Some("PONG"),
            "{url}: {pong:?}\n{}",
            server.log()
        );
    }
}

#[tokio::test]
async fn tls_fails_without_the_test_ca_and_over_plain_tcp() {
    let server = TlsServer::start();
    announce_tls("tls", &server);
    // The system roots do not know the test CA.
    let client = tls_client(&server.url(), None, None);
    let err = ping(&client)
        .await
        .expect_err("an unknown CA must be refused");
    eprintln!("TLS without the CA: {err}");
    // Plain RESP to the TLS port gets no answer a client accepts.
    let plain = redis::Client::open(format!("redis://127.0.0.1:{}/", server.port())).expect("url");
    assert!(
        ping(&plain).await.is_err(),
        "plain TCP to the TLS port must fail"
    );
}

#[tokio::test]
async fn mtls_requires_the_client_certificate() {
    let server = TlsServer::start_mtls();
    announce_tls("mtls", &server);
    let without = tls_client(&server.url(), Some(server.ca_pem()), None);
    assert!(
        ping(&without).await.is_err(),
        "mTLS without a client certificate"
    );
    let with = tls_client(&server.url(), Some(server.ca_pem()), Some(&server));
    let pong = ping(&with).await;
    assert_eq!(
        pong.as_deref().ok(),
        Some("PONG"),
        "{pong:?}\n{}",
        server.log()
    );
}

#[tokio::test]
async fn acl_user_over_rediss() {
    let server = TlsServer::start_with(false, &[("app", "s3cret", "on ~lock:* &lock:* +@all")]);
    announce_tls("tls + acl", &server);
    let url = server.url_for_user("app", "s3cret");
    assert!(url.starts_with("rediss://app:s3cret@127.0.0.1:"), "{url}");
    let client = tls_client(&url, Some(server.ca_pem()), None);
    let mut con = client
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", server.log()));
    let who: String = redis::cmd("ACL")
        .arg("WHOAMI")
        .query_async(&mut con)
        .await
        .expect("WHOAMI");
    assert_eq!(who, "app");
    let ok: redis::RedisResult<()> = redis::cmd("SET")
        .arg("lock:a")
        .arg(1)
        .query_async(&mut con)
        .await;
    assert!(ok.is_ok(), "{ok:?}");
    let denied: redis::RedisResult<()> = redis::cmd("SET")
        .arg("other:a")
        .arg(1)
        .query_async(&mut con)
        .await;
    assert_eq!(denied.expect_err("outside ~lock:*").code(), Some("NOPERM"));
}
