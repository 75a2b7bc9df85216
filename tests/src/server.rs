//! A private `redis-server` (or `valkey-server`, see [`crate::flavour`])
//! process for one test (or one test binary).
//!
//! The project's rules: loopback only, never port 6379, `--save ""
//! --appendonly no` unless the caller asks otherwise, a private temp dir, a
//! loud failure when the binary is not installed, a bounded wait for `PING`,
//! restart on the same port, kill on drop, the server log in every panic.

use std::ffi::OsString;
use std::fmt;
use std::fs;
use std::time::Duration;

use tempfile::TempDir;

use crate::flavour::{ServerFlavour, ensure_installed, server_flavour};
use crate::ports::{FORBIDDEN_PORT, HOST, free_ports};
use crate::process::{ServerProcess, arg};
use crate::url::user_url;

/// How many fresh ports to try when the one we picked was taken in the meantime.
const START_ATTEMPTS: usize = 5;

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
/// [`restart`](Self::restart). The binary is the flavour's
/// ([`server_flavour`](crate::server_flavour): `redis-server` or `valkey-server`).
pub struct RedisServer {
    // Field order matters: the process is killed (by `ServerProcess`'s `Drop`)
    // before the data dir is removed.
    process: Option<ServerProcess>,
    flavour: ServerFlavour,
    port: u16,
    extra_args: Vec<String>,
    harness_args: Vec<OsString>,
    runs: usize,
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
    /// If the server binary is not installed (the message has the install
    /// command), if `args` contains an argument the harness owns (`--port`,
    /// `--bind`, `--dir`, ...), or if the server does not answer `PING` within
    /// 10 s (the message has the server log).
    pub fn start_with_args(args: &[&str]) -> RedisServer {
        check_extra_args(args);
        Self::start_inner(args, |_| Vec::new())
    }

    /// Start a server with ACL users, written to an aclfile in the temp dir
    /// (`--aclfile`). Each entry is `(user, password, rules)`; the line is
    /// `user <user> <rules>`, with `><password>` added when `rules` does not
    /// already hold it. The `default` user stays as Redis makes it (`nopass`,
    /// all commands) unless an entry names it. Names and passwords cannot hold
    /// whitespace (the aclfile format splits on it).
    ///
    /// ```no_run
    /// let server = lockcore_tests::RedisServer::start_with_acl(&[(
    ///     "app",
    ///     "s3cret",
    ///     "on >s3cret ~lock:* &lock:* +@all",
    /// )]);
    /// let url = server.url_for_user("app", "s3cret"); // redis://app:s3cret@127.0.0.1:PORT/
    /// # drop(url);
    /// ```
    ///
    /// # Panics
    ///
    /// As [`start_with_args`](Self::start_with_args), and when the server
    /// refuses the aclfile (the message has the server log).
    pub fn start_with_acl(users: &[(&str, &str, &str)]) -> RedisServer {
        let acl = acl_file(users);
        Self::start_inner(&[], move |dir| {
            let path = dir.join("users.acl");
            fs::write(&path, &acl)
                .unwrap_or_else(|e| panic!("cannot write the aclfile {}: {e}", path.display()));
            vec![arg("--aclfile"), arg(path)]
        })
    }

    fn start_inner(
        args: &[&str],
        harness_args: impl FnOnce(&std::path::Path) -> Vec<OsString>,
    ) -> RedisServer {
        let flavour = server_flavour();
        ensure_installed(flavour, flavour.server_bin());
        let data_dir = tempfile::Builder::new()
            .prefix("lockcore-redis-data")
            .tempdir()
            .unwrap_or_else(|e| {
                panic!("cannot create a temp dir for {}: {e}", flavour.server_bin())
            });
        let harness_args = harness_args(data_dir.path());
        let mut server = RedisServer {
            process: None,
            flavour,
            port: 0,
            extra_args: args.iter().map(|a| (*a).to_owned()).collect(),
            harness_args,
            runs: 0,
            data_dir,
            previous_logs: String::new(),
        };
        for attempt in 1..=START_ATTEMPTS {
            server.port = free_ports(1, false)[0];
            match server.spawn_and_wait() {
                Ok(()) => return server,
                Err(reason) if server.port_taken() && attempt < START_ATTEMPTS => {
                    // Another process grabbed the port between the probe and the
                    // bind: try a fresh one.
                    server.stop_with_note(&format!(
                        "attempt {attempt} on port {}: port already in use ({reason})",
                        server.port
                    ));
                }
                Err(reason) => {
                    server.stop_with_note("start failed");
                    panic!(
                        "{} on {HOST}:{} (args {:?}) {reason}\nserver log:\n{}",
                        flavour.server_bin(),
                        server.port,
                        server.extra_args,
                        server.log()
                    )
                }
            }
        }
        unreachable!("the last start attempt either returns or panics")
    }

    /// The flavour this server runs (`redis` or `valkey`).
    pub fn flavour(&self) -> ServerFlavour {
        self.flavour
    }

    /// The TCP port the server listens on (never 6379).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT/`
    pub fn url(&self) -> String {
        format!("redis://{HOST}:{}/", self.port)
    }

    /// `redis://USER:PASSWORD@127.0.0.1:PORT/`, user and password
    /// percent-encoded.
    pub fn url_for_user(&self, user: &str, password: &str) -> String {
        user_url("redis", HOST, self.port, user, password)
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
        if let Some(process) = &self.process {
            log.push_str(&process.log());
        }
        log
    }

    /// Whether the process was started and not stopped since.
    pub fn is_running(&self) -> bool {
        self.process.is_some()
    }

    /// The OS process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().and_then(ServerProcess::pid)
    }

    /// Kill the server (`SIGKILL`) and wait for it to exit. Idempotent.
    ///
    /// The port is closed when this returns: new connections are refused.
    pub fn stop(&mut self) {
        let note = format!(
            "{} on port {} stopped by the harness",
            self.flavour.server_bin(),
            self.port
        );
        self.stop_with_note(&note);
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
        if let Err(reason) = self.spawn_and_wait() {
            self.stop_with_note("restart failed");
            panic!(
                "restarted {} on {HOST}:{} (args {:?}) {reason}\nfull log:\n{}",
                self.flavour.server_bin(),
                self.port,
                self.extra_args,
                self.log()
            );
        }
    }

    fn spawn_and_wait(&mut self) -> Result<(), String> {
        assert_ne!(
            self.port, FORBIDDEN_PORT,
            "the test harness must never use port {FORBIDDEN_PORT}"
        );
        self.runs += 1;
        let mut args = vec![
            arg("--port"),
            arg(self.port.to_string()),
            arg("--bind"),
            arg(HOST),
            arg("--save"),
            arg(""),
            arg("--appendonly"),
            arg("no"),
            arg("--enable-debug-command"),
            arg("yes"),
            arg("--dir"),
            arg(self.data_dir.path()),
        ];
        args.extend(self.harness_args.iter().cloned());
        args.extend(self.extra_args.iter().map(arg));
        let label = format!("server-{}-run{}", self.port, self.runs);
        let mut process = ServerProcess::spawn(self.flavour, &label, self.data_dir.path(), &args);
        let ready = process.wait_ready(self.port);
        self.process = Some(process);
        ready
    }

    fn port_taken(&self) -> bool {
        self.log().contains("Address already in use")
    }

    fn stop_with_note(&mut self, note: &str) {
        if let Some(mut process) = self.process.take() {
            process.kill();
            self.previous_logs.push_str(&process.log());
            self.previous_logs.push_str(&format!("--- {note} ---\n"));
        }
    }
}

impl fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisServer")
            .field("flavour", &self.flavour)
            .field("url", &self.url())
            .field("pid", &self.pid())
            .field("extra_args", &self.extra_args)
            .field("data_dir", &self.data_dir.path())
            .finish()
    }
}

/// The aclfile for [`RedisServer::start_with_acl`] (and the TLS server).
pub(crate) fn acl_file(users: &[(&str, &str, &str)]) -> String {
    let mut file = String::new();
    for (user, password, rules) in users {
        assert!(
            !user.contains(char::is_whitespace) && !password.contains(char::is_whitespace),
            "an aclfile cannot hold whitespace in a user name or password: {user:?}"
        );
        let secret = format!(">{password}");
        let has_secret = rules.split_whitespace().any(|rule| rule == secret);
        file.push_str(&format!("user {user} {rules}"));
        if !has_secret {
            file.push_str(&format!(" {secret}"));
        }
        file.push('\n');
    }
    file
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
        ensure_installed(
            ServerFlavour::Redis,
            "redis-server-that-does-not-exist-lockcore",
        );
    }
}
