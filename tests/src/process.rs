//! One server process (`redis-server`, `valkey-server`, a sentinel): spawned
//! in the foreground with its log in a given file, killed on drop.

use std::ffi::OsString;
use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::flavour::ServerFlavour;
use crate::poll::poll_sync;

/// How long to wait for the first `PONG` after spawning.
pub(crate) const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// Pause between readiness probes.
pub(crate) const READY_POLL: Duration = Duration::from_millis(20);

/// A spawned server process. `Drop` sends `SIGKILL` and reaps it.
#[derive(Debug)]
pub(crate) struct ServerProcess {
    child: Option<Child>,
    label: String,
    log_path: PathBuf,
    output_path: PathBuf,
}

impl ServerProcess {
    /// Spawn `flavour`'s server binary in `dir` with `args` (a config file
    /// first, if any), logging to `dir/<label>.log`. `--logfile` is appended;
    /// what the process prints before it takes effect goes to
    /// `dir/<label>.out`.
    ///
    /// # Panics
    ///
    /// If the binary is missing (with the install command) or cannot be spawned.
    pub(crate) fn spawn(
        flavour: ServerFlavour,
        label: &str,
        dir: &Path,
        args: &[OsString],
    ) -> ServerProcess {
        let log_path = dir.join(format!("{label}.log"));
        let output_path = dir.join(format!("{label}.out"));
        let output = fs::File::create(&output_path)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", output_path.display()));
        let errors = output.try_clone().unwrap_or_else(|e| {
            panic!("cannot clone the handle of {}: {e}", output_path.display())
        });
        let bin = flavour.server_bin();
        let mut cmd = Command::new(bin);
        cmd.args(args)
            .arg("--logfile")
            .arg(&log_path)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(output)
            .stderr(errors);
        let child = match cmd.spawn() {
            Ok(child) => child,
            Err(e) if e.kind() == ErrorKind::NotFound => panic!(
                "cannot start {cmd:?}: `{bin}` was not found on PATH. Install it with:\n    {}",
                flavour.install_hint()
            ),
            Err(e) => panic!("cannot start {cmd:?}: {e}"),
        };
        ServerProcess {
            child: Some(child),
            label: label.to_owned(),
            log_path,
            output_path,
        }
    }

    /// The OS process id, while running.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the process was not killed by the harness. It may have exited
    /// by itself: see [`exit_status`](Self::exit_status).
    pub(crate) fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// `Some(status)` once the process has exited (by itself or killed).
    pub(crate) fn exit_status(&mut self) -> Option<ExitStatus> {
        match self.child.as_mut() {
            Some(child) => child.try_wait().ok().flatten(),
            None => None,
        }
    }

    /// `SIGKILL`, then wait until the process is gone. Idempotent. The port
    /// refuses connections when this returns.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The log file and anything printed before it took effect, under a
    /// header with the label.
    pub(crate) fn log(&self) -> String {
        let mut log = format!("--- {} ({}) ---\n", self.label, self.log_path.display());
        if let Ok(out) = fs::read_to_string(&self.output_path)
            && !out.trim().is_empty()
        {
            log.push_str("stdout/stderr:\n");
            log.push_str(&out);
            log.push('\n');
        }
        log.push_str(&fs::read_to_string(&self.log_path).unwrap_or_default());
        if self.child.is_none() {
            log.push_str(&format!("--- {} killed by the harness ---\n", self.label));
        }
        log
    }

    /// Poll `PING` on `port` until the server answers (an auth error counts:
    /// the server is up), the process exits, or [`READY_TIMEOUT`] passes.
    pub(crate) fn wait_ready(&mut self, port: u16) -> Result<(), String> {
        let url = format!("redis://{}:{port}/", crate::ports::HOST);
        let client = redis::Client::open(url.as_str())
            .unwrap_or_else(|e| panic!("invalid redis url {url}: {e}"));
        poll_sync(READY_TIMEOUT, READY_POLL, || {
            if let Some(status) = self.exit_status() {
                return Ok(Err(format!("exited before answering PING ({status})")));
            }
            ping(&client).map(Ok)
        })
        .and_then(|exited| exited)
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One `PING` with short timeouts. `Ok` when the server answered at all.
pub(crate) fn ping(client: &redis::Client) -> Result<(), String> {
    let mut con = client
        .get_connection_with_timeout(Duration::from_millis(500))
        .map_err(|e| e.to_string())?;
    con.set_read_timeout(Some(Duration::from_millis(500)))
        .map_err(|e| e.to_string())?;
    match redis::cmd("PING").query::<String>(&mut con) {
        Ok(pong) if pong == "PONG" => Ok(()),
        Ok(other) => Err(format!("unexpected PING reply {other:?}")),
        Err(e) if e.code() == Some("NOAUTH") || e.code() == Some("NOPERM") => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

/// `s` as an `OsString` argument.
pub(crate) fn arg(s: impl Into<OsString>) -> OsString {
    s.into()
}

/// A server process of a topology (cluster node, sentinel set-up member) with its port, behind a
/// mutex so that killing it takes `&self`.
pub(crate) struct Member {
    pub(crate) port: u16,
    process: Mutex<ServerProcess>,
}

impl Member {
    pub(crate) fn new(port: u16, process: ServerProcess) -> Self {
        Member {
            port,
            process: Mutex::new(process),
        }
    }

    pub(crate) fn process(&self) -> MutexGuard<'_, ServerProcess> {
        // A panic while holding the lock leaves the process as it was.
        self.process.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
