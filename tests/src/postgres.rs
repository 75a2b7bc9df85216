//! A private PostgreSQL server for one test (or one example run), started as the harness starts
//! redis-server: `initdb` in a temp dir, `pg_ctl start` on a free port of 127.0.0.1 only (no
//! Unix socket outside the temp dir), `pg_ctl stop -m immediate` (then `SIGKILL`) on drop, the
//! server log in every panic, and a loud failure with the install command when PostgreSQL is
//! missing.
//!
//! PostgreSQL refuses to run as root: when the harness runs as root, every server binary runs as
//! the `postgres` user (`runuser -u postgres --`), which owns the temp dir. Authentication is
//! `trust` on loopback, for the superuser `postgres`.
//!
//! The binaries are looked up in `$LOCKCORE_PG_BINDIR`, then the newest
//! `/usr/lib/postgresql/<version>/bin` (Debian's `postgresql` package), then `PATH`.

use std::ffi::OsString;
use std::fmt;
use std::fs;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use tempfile::TempDir;

use crate::ports::{FORBIDDEN_PORT, HOST, free_ports};

/// The variable that names the directory of `initdb`, `pg_ctl` and `postgres`.
pub const PG_BINDIR_ENV: &str = "LOCKCORE_PG_BINDIR";

/// The command that installs PostgreSQL on the project's machines (Debian's `postgresql`).
pub const POSTGRES_INSTALL_HINT: &str =
    "scripts/ensure-postgres (or: sudo apt-get update && sudo apt-get install -y postgresql)";

/// Where Debian installs each major version's server binaries.
const DEBIAN_LIB: &str = "/usr/lib/postgresql";

/// PostgreSQL's own default port; like 6379 for Redis, a test never takes it.
const DEFAULT_PG_PORT: u16 = 5432;

/// How many fresh ports to try when the one picked was taken in the meantime.
const START_ATTEMPTS: usize = 5;

/// How long `pg_ctl` may wait for the server to accept connections, or to stop.
const PG_CTL_TIMEOUT_S: &str = "30";

/// The OS user that runs the server when the harness runs as root.
const PG_USER: &str = "postgres";

/// A private PostgreSQL server on `127.0.0.1` and a free port, stopped on drop.
///
/// ```no_run
/// let pg = lockcore_tests::PostgresServer::start();
/// let config = pg.connection_string(); // "host=127.0.0.1 port=PORT user=postgres dbname=postgres"
/// # drop(config);
/// ```
pub struct PostgresServer {
    port: u16,
    bin_dir: Option<PathBuf>,
    as_postgres: bool,
    running: bool,
    // Dropped last: the server is stopped before its files are removed.
    dir: TempDir,
}

impl PostgresServer {
    /// `initdb`, then start the server on a free loopback port and wait until it accepts
    /// connections.
    ///
    /// # Panics
    ///
    /// If PostgreSQL is not installed (the message has the install command), if the `postgres`
    /// user is missing while running as root, or if the server does not start (the message has
    /// the server log).
    pub fn start() -> PostgresServer {
        let bin_dir = find_bin_dir();
        let as_postgres = rustix::process::geteuid().is_root();
        let dir = temp_dir(as_postgres);
        let mut server = PostgresServer {
            port: 0,
            bin_dir,
            as_postgres,
            running: false,
            dir,
        };
        server.initdb();
        for attempt in 1..=START_ATTEMPTS {
            server.port = free_port();
            let Err(reason) = server.pg_ctl_start() else {
                return server;
            };
            // Another process may have taken the port between the probe and the bind.
            let port_taken = server.log().contains("could not bind");
            if !port_taken || attempt == START_ATTEMPTS {
                panic!(
                    "PostgreSQL on {HOST}:{} did not start: {reason}\nserver log:\n{}",
                    server.port,
                    server.log()
                );
            }
        }
        unreachable!("the last start attempt either returns or panics")
    }

    /// The TCP port the server listens on (never 5432 or 6379).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A libpq key/value connection string for the superuser `postgres` and database
    /// `postgres`, with a 5 s connect timeout (what `tokio_postgres::connect` takes).
    pub fn connection_string(&self) -> String {
        format!(
            "host={HOST} port={} user={PG_USER} dbname=postgres connect_timeout=5",
            self.port
        )
    }

    /// `postgres://postgres@127.0.0.1:PORT/postgres`
    pub fn url(&self) -> String {
        format!("postgres://{PG_USER}@{HOST}:{}/postgres", self.port)
    }

    /// The server log (and `initdb`'s output).
    pub fn log(&self) -> String {
        let mut log = String::new();
        for name in ["initdb.log", "server.log"] {
            let path = self.dir.path().join(name);
            log.push_str(&format!("--- {} ---\n", path.display()));
            log.push_str(&fs::read_to_string(&path).unwrap_or_default());
        }
        log
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// A server binary as the user that may run it.
    fn command(&self, bin: &str) -> Command {
        let path = match &self.bin_dir {
            Some(dir) => dir.join(bin).into_os_string(),
            None => OsString::from(bin),
        };
        let mut cmd = if self.as_postgres {
            let mut cmd = Command::new("runuser");
            cmd.args(["-u", PG_USER, "--"]).arg(path);
            cmd
        } else {
            Command::new(path)
        };
        // The server's working directory must be readable by the `postgres` user.
        cmd.current_dir(self.dir.path()).stdin(Stdio::null());
        cmd
    }

    fn initdb(&self) {
        let mut cmd = self.command("initdb");
        cmd.arg("-D")
            .arg(self.data_dir())
            .args(["-U", PG_USER, "-A", "trust", "-E", "UTF8", "--locale=C"])
            .args(["--no-sync", "--no-instructions"]);
        let out = run(&mut cmd);
        let log = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // As root the log is written by this process; the server never needs it.
        let _ = fs::write(self.dir.path().join("initdb.log"), &log);
        assert!(
            out.status.success(),
            "{cmd:?} failed ({}):\n{log}",
            out.status
        );
    }

    fn pg_ctl_start(&mut self) -> Result<(), String> {
        assert!(
            self.port != FORBIDDEN_PORT && self.port != DEFAULT_PG_PORT,
            "the test harness never uses port {}",
            self.port
        );
        // The server's own options, split by pg_ctl's shell: the temp dir's path has no space.
        let options = format!(
            "-p {} -c listen_addresses={HOST} -c unix_socket_directories='{}' \
             -c fsync=off -c synchronous_commit=off -c full_page_writes=off \
             -c shared_buffers=16MB -c max_connections=40",
            self.port,
            self.dir.path().display()
        );
        let mut cmd = self.command("pg_ctl");
        cmd.arg("-D")
            .arg(self.data_dir())
            .arg("-l")
            .arg(self.dir.path().join("server.log"))
            .args(["-w", "-t", PG_CTL_TIMEOUT_S, "-o", &options, "start"]);
        let out = run(&mut cmd);
        if !out.status.success() {
            return Err(format!(
                "{cmd:?} failed ({}): {}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        self.running = true;
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        TcpStream::connect_timeout(&addr, Duration::from_secs(5))
            .map(drop)
            .map_err(|e| format!("pg_ctl said ready, but {HOST}:{} refused: {e}", self.port))
    }

    /// `pg_ctl stop -m immediate`, then `SIGKILL` to a postmaster that is still there.
    fn stop(&mut self) {
        if !std::mem::take(&mut self.running) {
            return;
        }
        let mut cmd = self.command("pg_ctl");
        cmd.arg("-D")
            .arg(self.data_dir())
            .args(["-m", "immediate", "-w", "-t", PG_CTL_TIMEOUT_S, "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let _ = cmd.status();
        if let Some(pid) = postmaster_pid(&self.data_dir()) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        self.stop();
    }
}

impl fmt::Debug for PostgresServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresServer")
            .field("url", &self.url())
            .field("bin_dir", &self.bin_dir)
            .field("as_postgres", &self.as_postgres)
            .field("dir", &self.dir.path())
            .finish()
    }
}

/// A free loopback port that is neither Redis's nor PostgreSQL's default.
fn free_port() -> u16 {
    free_ports(3, false)
        .into_iter()
        .find(|&p| p != DEFAULT_PG_PORT)
        .unwrap_or_else(|| panic!("no free loopback port other than {DEFAULT_PG_PORT}"))
}

/// Runs `cmd` to completion.
///
/// # Panics
///
/// If it cannot be started at all: PostgreSQL (or `runuser`) is not installed.
fn run(cmd: &mut Command) -> Output {
    cmd.output().unwrap_or_else(|e| {
        panic!(
            "cannot run {cmd:?}: {e}. PostgreSQL's server binaries are needed; install them with:\n    {POSTGRES_INSTALL_HINT}"
        )
    })
}

/// `$LOCKCORE_PG_BINDIR`, else the newest Debian version's `bin`, else `None` (use `PATH`).
///
/// # Panics
///
/// If `initdb` is in none of them, with the install command.
fn find_bin_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os(PG_BINDIR_ENV) {
        let dir = PathBuf::from(dir);
        assert!(
            dir.join("initdb").is_file(),
            "{PG_BINDIR_ENV}={} holds no `initdb`; unset it to use Debian's PostgreSQL, \
             installed with:\n    {POSTGRES_INSTALL_HINT}",
            dir.display()
        );
        return Some(dir);
    }
    let newest = fs::read_dir(DEBIAN_LIB)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version: u32 = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .max();
    if let Some((_, bin)) = newest {
        return Some(bin);
    }
    let on_path = Command::new("initdb")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        on_path,
        "PostgreSQL's server binaries (`initdb`, `pg_ctl`) were found neither in `{PG_BINDIR_ENV}`, \
         nor in {DEBIAN_LIB}/<version>/bin, nor on PATH. Install them with:\n    {POSTGRES_INSTALL_HINT}"
    );
    None
}

/// A temp dir for the data, the socket and the log, owned by `postgres` when the server runs as
/// that user (under `/tmp`, which every user can enter, rather than a `TMPDIR` of root's).
fn temp_dir(as_postgres: bool) -> TempDir {
    let mut builder = tempfile::Builder::new();
    builder.prefix("lockcore-pg");
    let dir = if as_postgres {
        builder.tempdir_in("/tmp")
    } else {
        builder.tempdir()
    }
    .unwrap_or_else(|e| panic!("cannot create a temp dir for PostgreSQL: {e}"));
    if as_postgres {
        chown_to_postgres(dir.path());
    }
    dir
}

/// `chown postgres: path`.
///
/// # Panics
///
/// If there is no `postgres` user (the install command creates it).
fn chown_to_postgres(path: &Path) {
    let id = |flag: &str| -> u32 {
        let out = Command::new("id")
            .args([flag, PG_USER])
            .output()
            .unwrap_or_else(|e| panic!("cannot run `id {flag} {PG_USER}`: {e}"));
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .unwrap_or_else(|_| {
                panic!(
                    "there is no `{PG_USER}` user to run PostgreSQL as (it refuses root). \
                     Install PostgreSQL with:\n    {POSTGRES_INSTALL_HINT}"
                )
            })
    };
    let (uid, gid) = (id("-u"), id("-g"));
    std::os::unix::fs::chown(path, Some(uid), Some(gid))
        .unwrap_or_else(|e| panic!("cannot chown {} to {PG_USER}: {e}", path.display()));
}

/// The postmaster's pid from `postmaster.pid`, while the file exists.
fn postmaster_pid(data_dir: &Path) -> Option<rustix::process::Pid> {
    let text = fs::read_to_string(data_dir.join("postmaster.pid")).ok()?;
    let pid: i32 = text.lines().next()?.trim().parse().ok()?;
    rustix::process::Pid::from_raw(pid)
}
