//! `lockctl --url rediss://... --tls-ca CA.pem` against a real TLS `redis-server`, with a CA
//! and server certificate made here by `openssl`.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{fails_with, json};

/// A TLS-only redis-server on a free loopback port, killed on drop.
struct TlsServer {
    child: Child,
    port: u16,
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl (apt-get install openssl)");
    assert!(out.status.success(), "openssl {args:?}: {out:?}");
}

/// `ca.pem`, and `server.pem` / `server.key` signed by it (SAN localhost and 127.0.0.1).
fn make_certificates(dir: &Path) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=lockctl test CA",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
        ],
    );
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=localhost",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
        ],
    );
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n",
    )
    .expect("ext.cnf");
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
            "-out",
            "server.pem",
        ],
    );
}

fn start(dir: &Path) -> TlsServer {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    assert_ne!(port, 6379, "never the developer's own Redis port");
    let child = Command::new("redis-server")
        .args([
            "--port",
            "0",
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .args(["--tls-port", &port.to_string(), "--tls-auth-clients", "no"])
        .args([
            "--tls-cert-file",
            "server.pem",
            "--tls-key-file",
            "server.key",
        ])
        .args(["--tls-ca-cert-file", "ca.pem"])
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server");
    TlsServer { child, port }
}

fn redis_cli(dir: &Path, port: u16, args: &[&str]) -> Option<String> {
    let out = Command::new("redis-cli")
        .args([
            "--tls",
            "--cacert",
            "ca.pem",
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_over_tls_with_a_private_ca() {
    let dir = tempfile::tempdir().expect("temp dir");
    make_certificates(dir.path());
    let server = start(dir.path());
    let mut ready = false;
    for _ in 0..500 {
        if redis_cli(dir.path(), server.port, &["PING"]).as_deref() == Some("PONG") {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(ready, "the TLS redis-server never answered");
    let value =
        "00000000-0000-4000-8000-000000000001 {\"host\":\"tls-host\",\"pid\":7,\"acquired_at\":1}";
    redis_cli(
        dir.path(),
        server.port,
        &["SET", "lock:tls:1", value, "PX", "60000"],
    )
    .expect("SET");

    let url = format!("rediss://127.0.0.1:{}/", server.port);
    let ca = dir.path().join("ca.pem");
    let ca = ca.to_str().expect("utf-8 path");
    let records = json(&["--url", &url, "--tls-ca", ca, "list", "--json"]).await;
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["host"], "tls-host");
    // Without the CA the certificate is not trusted: one line, non-zero exit.
    fails_with(&["--url", &url, "list"], &["cannot connect"]).await;
    fails_with(
        &["--url", &url, "--tls-ca", "/nonexistent.pem", "list"],
        &["--tls-ca file"],
    )
    .await;
}
