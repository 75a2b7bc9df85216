//! A private `redis-server` process for one test (or one test binary).
//!
//! Process management (temp dir, log file, `--save ""`, kill on drop, free
//! port) is done by [`redis_test::server::RedisServer`]; this module adds the
//! project's rules on top: loopback only, never port 6379, `--appendonly no`
//! unless the caller asks otherwise, a loud failure when `redis-server` is not
//! installed, a bounded wait for `PING`, and restart on the same port.

use std::fmt;
use std::io::{ErrorKind, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use redis::ConnectionAddr;
use tempfile::TempDir;

type Inner = redis_test::server::RedisServer;

/// The address every test server binds to. Never anything but loopback.
const HOST: &str = "127.0.0.1";

/// The port a developer's own Redis most likely uses. A test must never touch it.
const FORBIDDEN_PORT: u16 = 6379;

/// How long to wait for the first `PONG` after spawning.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// Pause between readiness probes.
const READY_POLL: Duration = Duration::from_millis(20);

/// How many fresh ports to try when the one we picked was taken in the meantime.
const START_ATTEMPTS: usize = 5;

/// The command that installs the server on the project's machines (Debian).
pub const INSTALL_HINT: &str = "sudo apt-get update && sudo apt-get install -y redis-server";

/// Arguments the harness owns. Passing them as extra args would break the
/// loopback/port/temp-dir guarantees (or detach the process), so they are refused.
const RESERVED_ARGS: &[&str] = &[
    "--port",
    "--bind",
    "--tls-port",
    "--unixsocket",
    "--dir",
    "--logfile",
    "--daemonize",
    "--save",
];

/// A private `redis-server` on `127.0.0.1` and a free port, killed on drop.
///
/// Started with `--save "" --appendonly no` (plus any extra args), inside a temp
/// dir that lives as long as this value, so `--appendonly yes` data survives
/// [`restart`](Self::restart).
pub struct RedisServer {
    // Field order matters: the process is killed (by `Inner`'s `Drop`) before
    // the data dir is removed.
    inner: Option<Inner>,
    port: u16,
    extra_args: Vec<String>,
    data_dir: TempDir,
    previous_logs: String,
}

impl RedisServer {
    /// Start a server with the default arguments.
    pub fn start() -> RedisServer {
        Self::start_with_args(&[])
    }

    /// Start a server with extra `redis-server` arguments, appended after the
    /// defaults (so `--appendonly yes --appendfsync always` or
    /// `--maxmemory-policy allkeys-lru` override them).
    ///
    /// # Panics
    ///
    /// If `redis-server` is not installed (the message has the install
    /// command), if `args` contains an argument the harness owns (`--port`,
    /// `--bind`, `--dir`, ...), or if the server does not answer `PING` within
    /// 10 s (the message has the server log).
    pub fn start_with_args(args: &[&str]) -> RedisServer {
        check_extra_args(args);
        ensure_installed("redis-server");
        if let Ok(bin) = std::env::var("REDISRS_SERVER_BIN") {
            ensure_installed(&bin);
        }

        let data_dir = tempfile::Builder::new()
            .prefix("lockcore-redis-data")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a temp dir for redis-server: {e}"));
        let extra_args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();

        let mut failures = String::new();
        for attempt in 1..=START_ATTEMPTS {
            let port = pick_port();
            let mut inner = spawn(port, data_dir.path(), &extra_args);
            match wait_ready(&mut inner, port) {
                Ok(()) => {
                    return RedisServer {
                        inner: Some(inner),
                        port,
                        extra_args,
                        data_dir,
                        previous_logs: failures,
                    };
                }
                Err(failure) if failure.port_taken() && attempt < START_ATTEMPTS => {
                    // Another process grabbed the port between the probe and the
                    // bind: try a fresh one.
                    failures.push_str(&format!(
                        "--- attempt {attempt} on port {port}: port already in use ---\n{}\n",
                        failure.details
                    ));
                }
                Err(failure) => panic!(
                    "redis-server on {HOST}:{port} (args {extra_args:?}) {}\n{}",
                    failure.reason, failure.details
                ),
            }
        }
        unreachable!("the last start attempt either returns or panics")
    }

    /// The TCP port the server listens on (never 6379).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT/`
    pub fn url(&self) -> String {
        format!("redis://{HOST}:{}/", self.port)
    }

    /// A `redis::Client` for this server.
    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url())
            .unwrap_or_else(|e| panic!("invalid redis url {}: {e}", self.url()))
    }

    /// An independent raw connection for assertions (`GET`, `PTTL`,
    /// `SCRIPT FLUSH`, `DEBUG SLEEP`, ...).
    ///
    /// Connect timeout 5 s, response timeout 30 s (long enough for a
    /// `DEBUG SLEEP`). Under a paused tokio clock these timers fire at once;
    /// use [`connection_with_config`](Self::connection_with_config) with
    /// `set_connection_timeout(None).set_response_timeout(None)` there.
    ///
    /// # Panics
    ///
    /// If the server cannot be reached (the message has the server log).
    pub async fn connection(&self) -> redis::aio::MultiplexedConnection {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(5)))
            .set_response_timeout(Some(Duration::from_secs(30)));
        self.connection_with_config(&config).await
    }

    /// Like [`connection`](Self::connection), with the caller's config.
    pub async fn connection_with_config(
        &self,
        config: &redis::AsyncConnectionConfig,
    ) -> redis::aio::MultiplexedConnection {
        match self
            .client()
            .get_multiplexed_async_connection_with_config(config)
            .await
        {
            Ok(con) => con,
            Err(e) => panic!(
                "cannot connect to the test redis-server at {}: {e}\nserver log:\n{}",
                self.url(),
                self.log()
            ),
        }
    }

    /// The server log: every run of this server so far, oldest first.
    pub fn log(&self) -> String {
        let mut log = self.previous_logs.clone();
        if let Some(inner) = &self.inner {
            log.push_str(&inner.log_file_contents().unwrap_or_default());
        }
        log
    }

    /// Whether the process was started and not stopped since.
    pub fn is_running(&self) -> bool {
        self.inner.is_some()
    }

    /// The OS process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.inner.as_ref().map(|inner| inner.process.id())
    }

    /// Kill the server (`SIGKILL`) and wait for it to exit. Idempotent.
    ///
    /// The port is closed when this returns: new connections are refused.
    pub fn stop(&mut self) {
        if let Some(mut inner) = self.inner.take() {
            inner.stop();
            self.previous_logs
                .push_str(&inner.log_file_contents().unwrap_or_default());
            self.previous_logs.push_str(&format!(
                "--- redis-server on port {} stopped by the harness ---\n",
                self.port
            ));
        }
    }

    /// Start the server again on the same port with the same args (stopping
    /// it first if it is running). Data survives only with `--appendonly yes`.
    ///
    /// # Panics
    ///
    /// If the server does not answer `PING` within 10 s, e.g. because another
    /// process took the port while it was down.
    pub fn restart(&mut self) {
        self.stop();
        let mut inner = spawn(self.port, self.data_dir.path(), &self.extra_args);
        let ready = wait_ready(&mut inner, self.port);
        self.inner = Some(inner);
        if let Err(failure) = ready {
            self.stop();
            panic!(
                "restarted redis-server on {HOST}:{} (args {:?}) {}\n{}\nfull log:\n{}",
                self.port,
                self.extra_args,
                failure.reason,
                failure.details,
                self.log()
            );
        }
    }
}

impl fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisServer")
            .field("url", &self.url())
            .field("pid", &self.pid())
            .field("extra_args", &self.extra_args)
            .field("data_dir", &self.data_dir.path())
            .finish()
    }
}

/// Panic with the install command when `bin` cannot be executed.
fn ensure_installed(bin: &str) {
    let probe = Command::new(bin)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    match probe {
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => panic!(
            "`{bin}` was not found on PATH; the lockcore integration tests need a real Redis \
             server. Install it with:\n    {INSTALL_HINT}"
        ),
        Err(e) => {
            panic!("cannot run `{bin} --version` ({e}); install Redis with:\n    {INSTALL_HINT}")
        }
    }
}

fn check_extra_args(args: &[&str]) {
    for arg in args {
        let name = arg
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_ascii_lowercase();
        if RESERVED_ARGS.contains(&name.as_str()) {
            panic!(
                "lockcore_tests::RedisServer owns `{name}` (loopback only, free port never 6379, \
                 private temp dir, foreground process, no snapshots); remove it from the extra args {args:?}"
            );
        }
    }
}

/// A free port on loopback that is not 6379.
fn pick_port() -> u16 {
    for _ in 0..100 {
        let port = redis_test::utils::get_random_available_port();
        if port != FORBIDDEN_PORT {
            return port;
        }
    }
    panic!("could not find a free port other than {FORBIDDEN_PORT}");
}

fn spawn(port: u16, data_dir: &Path, extra_args: &[String]) -> Inner {
    assert_ne!(
        port, FORBIDDEN_PORT,
        "the test harness must never use port {FORBIDDEN_PORT}"
    );
    let addr = ConnectionAddr::Tcp(HOST.to_owned(), port);
    Inner::new_with_addr_tls_modules_and_spawner(addr, None, None, false, None, &[], |cmd| {
        cmd.arg("--appendonly")
            .arg("no")
            .arg("--dir")
            .arg(data_dir)
            .args(extra_args)
            .current_dir(data_dir)
            .stdin(Stdio::null());
        cmd.spawn().unwrap_or_else(|e| {
            if e.kind() == ErrorKind::NotFound {
                panic!(
                    "cannot start {cmd:?}: the redis-server binary was not found. Install it with:\n    {INSTALL_HINT}"
                )
            }
            panic!("cannot start {cmd:?}: {e}")
        })
    })
}

struct StartFailure {
    reason: String,
    details: String,
}

impl StartFailure {
    fn port_taken(&self) -> bool {
        self.details.contains("Address already in use")
    }
}

/// Poll `PING` until `PONG`, the process exits, or [`READY_TIMEOUT`] passes.
fn wait_ready(inner: &mut Inner, port: u16) -> Result<(), StartFailure> {
    let client = redis::Client::open(format!("redis://{HOST}:{port}/"))
        .unwrap_or_else(|e| panic!("invalid redis url for port {port}: {e}"));
    let started = Instant::now();
    loop {
        if let Ok(Some(status)) = inner.process.try_wait() {
            return Err(StartFailure {
                reason: format!("exited before answering PING ({status})"),
                details: format!(
                    "stderr/stdout:\n{}\nserver log:\n{}",
                    drain_output(&mut inner.process),
                    inner.log_file_contents().unwrap_or_default()
                ),
            });
        }
        let last_error = match ping(&client) {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        if started.elapsed() >= READY_TIMEOUT {
            inner.stop();
            return Err(StartFailure {
                reason: format!(
                    "did not answer PING within {READY_TIMEOUT:?} (last error: {last_error})"
                ),
                details: format!(
                    "stderr/stdout:\n{}\nserver log:\n{}",
                    drain_output(&mut inner.process),
                    inner.log_file_contents().unwrap_or_default()
                ),
            });
        }
        thread::sleep(READY_POLL);
    }
}

fn ping(client: &redis::Client) -> Result<(), String> {
    let mut con = client
        .get_connection_with_timeout(Duration::from_millis(500))
        .map_err(|e| e.to_string())?;
    con.set_read_timeout(Some(Duration::from_millis(500)))
        .map_err(|e| e.to_string())?;
    let pong: String = redis::cmd("PING")
        .query(&mut con)
        .map_err(|e| e.to_string())?;
    if pong == "PONG" {
        Ok(())
    } else {
        Err(format!("unexpected PING reply {pong:?}"))
    }
}

/// What the (exited) process printed before `--logfile` took effect, e.g. a
/// config error.
fn drain_output(process: &mut Child) -> String {
    let mut out = String::new();
    if let Some(stderr) = process.stderr.as_mut() {
        let _ = stderr.read_to_string(&mut out);
    }
    if let Some(stdout) = process.stdout.as_mut() {
        let _ = stdout.read_to_string(&mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sync_ping(server: &RedisServer) -> redis::RedisResult<String> {
        let mut con = server
            .client()
            .get_connection_with_timeout(Duration::from_secs(2))?;
        redis::cmd("PING").query(&mut con)
    }

    #[test]
    fn start_ping_url_and_port() {
        let server = RedisServer::start();
        assert_ne!(server.port(), 6379);
        assert_eq!(
            server.url(),
            format!("redis://127.0.0.1:{}/", server.port())
        );
        assert_eq!(sync_ping(&server).ok().as_deref(), Some("PONG"));
        assert!(server.is_running());
        assert!(format!("{server:?}").contains(&server.port().to_string()));
    }

    #[test]
    fn binds_loopback_only_with_no_persistence() {
        let server = RedisServer::start();
        let mut con = server
            .client()
            .get_connection_with_timeout(Duration::from_secs(2))
            .unwrap_or_else(|e| panic!("connect: {e}"));
        let get = |con: &mut redis::Connection, name: &str| -> String {
            let pair: Vec<String> = redis::cmd("CONFIG")
                .arg("GET")
                .arg(name)
                .query(con)
                .unwrap_or_else(|e| panic!("CONFIG GET {name}: {e}"));
            pair.get(1).cloned().unwrap_or_default()
        };
        assert_eq!(get(&mut con, "bind"), "127.0.0.1");
        assert_eq!(get(&mut con, "appendonly"), "no");
        assert_eq!(get(&mut con, "save"), "");
        assert_eq!(get(&mut con, "port"), server.port().to_string());
    }

    #[tokio::test]
    async fn async_connection_and_stop_refuses_then_restart() {
        let mut server = RedisServer::start();
        let port = server.port();
        let mut con = server.connection().await;
        let _: () = redis::cmd("SET")
            .arg("k")
            .arg("v")
            .query_async(&mut con)
            .await
            .unwrap_or_else(|e| panic!("SET: {e}"));

        server.stop();
        assert!(!server.is_running());
        let err = match server
            .client()
            .get_connection_with_timeout(Duration::from_secs(2))
        {
            Ok(_) => panic!("connected to a stopped server"),
            Err(e) => e,
        };
        assert!(err.is_connection_refusal(), "expected refusal, got {err}");
        server.stop(); // idempotent

        server.restart();
        assert_eq!(server.port(), port);
        let mut con = server.connection().await;
        let value: Option<String> = redis::cmd("GET")
            .arg("k")
            .query_async(&mut con)
            .await
            .unwrap_or_else(|e| panic!("GET: {e}"));
        assert_eq!(
            value, None,
            "appendonly no: data must not survive a restart"
        );
        assert!(server.log().contains("stopped by the harness"));
    }

    #[tokio::test]
    async fn appendonly_data_survives_restart() {
        let mut server =
            RedisServer::start_with_args(&["--appendonly", "yes", "--appendfsync", "always"]);
        let mut con = server.connection().await;
        let _: () = redis::cmd("SET")
            .arg("durable")
            .arg("1")
            .query_async(&mut con)
            .await
            .unwrap_or_else(|e| panic!("SET: {e}"));
        server.restart();
        let mut con = server.connection().await;
        let value: Option<String> = redis::cmd("GET")
            .arg("durable")
            .query_async(&mut con)
            .await
            .unwrap_or_else(|e| panic!("GET: {e}"));
        assert_eq!(value.as_deref(), Some("1"));
    }

    #[tokio::test]
    async fn extra_args_are_applied_and_debug_is_enabled() {
        let server = RedisServer::start_with_args(&["--maxmemory-policy", "allkeys-lru"]);
        let mut con = server.connection().await;
        let pair: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("maxmemory-policy")
            .query_async(&mut con)
            .await
            .unwrap_or_else(|e| panic!("CONFIG GET: {e}"));
        assert_eq!(pair.get(1).map(String::as_str), Some("allkeys-lru"));
        let _: () = redis::cmd("DEBUG")
            .arg("SLEEP")
            .arg("0.6")
            .query_async(&mut con)
            .await
            .unwrap_or_else(|e| panic!("DEBUG SLEEP beyond 500 ms must not time out: {e}"));
    }

    #[test]
    #[should_panic(expected = "owns `--port`")]
    fn refuses_port_override() {
        let _server = RedisServer::start_with_args(&["--port", "6379"]);
    }

    #[test]
    #[should_panic(expected = "owns `--bind`")]
    fn refuses_bind_override() {
        let _server = RedisServer::start_with_args(&["--bind", "0.0.0.0"]);
    }

    #[test]
    #[should_panic(expected = "exited before answering PING")]
    fn bad_argument_fails_loudly_with_output() {
        let _server = RedisServer::start_with_args(&["--no-such-directive", "1"]);
    }

    #[test]
    #[should_panic(expected = "sudo apt-get update && sudo apt-get install -y redis-server")]
    fn missing_binary_names_the_install_command() {
        ensure_installed("redis-server-that-does-not-exist-lockcore");
    }
}
