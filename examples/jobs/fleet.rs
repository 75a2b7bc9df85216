//! A fleet of worker processes for the job and leader examples: copies of the example's own
//! binary, started with arguments, their stdout lines merged into one channel (tagged with the
//! worker's index), stopped, resumed and killed by signal.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Worker processes and their merged output.
pub(crate) struct Fleet {
    children: Vec<Child>,
    lines: mpsc::UnboundedReceiver<(usize, String)>,
}

impl Fleet {
    /// Starts one worker per entry of `args`: this binary with those arguments.
    pub(crate) fn start(args: &[Vec<String>]) -> Result<Fleet, BoxError> {
        let exe = std::env::current_exe()?;
        let (send, lines) = mpsc::unbounded_channel();
        let mut children = Vec::with_capacity(args.len());
        for (index, worker_args) in args.iter().enumerate() {
            let mut child = Command::new(&exe)
                .args(worker_args)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .kill_on_drop(true)
                .spawn()?;
            let stdout = child.stdout.take().ok_or("worker without stdout")?;
            let send = send.clone();
            tokio::spawn(async move {
                let mut out = BufReader::new(stdout).lines();
                while let Ok(Some(line)) = out.next_line().await {
                    if send.send((index, line)).is_err() {
                        break;
                    }
                }
            });
            children.push(child);
        }
        Ok(Fleet { children, lines })
    }

    /// The next line of any worker, within `within`; `None` when none came (or all exited).
    pub(crate) async fn next(&mut self, within: Duration) -> Option<(usize, String)> {
        tokio::time::timeout(within, self.lines.recv())
            .await
            .ok()
            .flatten()
    }

    /// Sends `signal` (`-STOP`, `-CONT`, `-KILL`) to worker `index`.
    pub(crate) fn signal(&self, index: usize, signal: &str) -> Result<(), BoxError> {
        let pid = self
            .children
            .get(index)
            .and_then(Child::id)
            .ok_or("the worker has exited")?;
        let status = std::process::Command::new("kill")
            .arg(signal)
            .arg(pid.to_string())
            .status()?;
        if !status.success() {
            return Err(format!("kill {signal} {pid}: {status}").into());
        }
        Ok(())
    }

    /// Waits for every worker to exit, at most `within` each; the ones still running are killed.
    pub(crate) async fn finish(mut self, within: Duration) {
        for child in &mut self.children {
            if tokio::time::timeout(within, child.wait()).await.is_err() {
                let _ = child.start_kill();
                let _ = child.wait().await;
            }
        }
    }
}

/// The Redis to use: `url`, or a private `redis-server` started for the run (kept alive by the
/// returned handle).
pub(crate) fn redis(url: Option<String>) -> (String, Option<lockcore_tests::RedisServer>) {
    match url {
        Some(url) => (url, None),
        None => {
            let server = lockcore_tests::RedisServer::start();
            (server.url(), Some(server))
        }
    }
}

/// The exit code of a run of example `name`: failure, with the error on stderr, for an error.
pub(crate) fn exit(name: &str, outcome: Result<(), BoxError>) -> std::process::ExitCode {
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
