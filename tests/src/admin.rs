//! One-off admin commands to a harness node, sync or async, with short
//! timeouts so a dead node costs at most about a second.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::ports::HOST;

/// Connect and response timeout for admin commands.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(2);

/// Send `cmd` to the node on `port` over a fresh connection and read the reply.
pub(crate) fn query<T: redis::FromRedisValue>(port: u16, cmd: &redis::Cmd) -> Result<T, String> {
    let client = client(port)?;
    let mut con = client
        .get_connection_with_timeout(ADMIN_TIMEOUT)
        .map_err(|e| format!("connect to {HOST}:{port}: {e}"))?;
    con.set_read_timeout(Some(ADMIN_TIMEOUT))
        .map_err(|e| e.to_string())?;
    cmd.query(&mut con)
        .map_err(|e| format!("{HOST}:{port}: {e}"))
}

/// The async twin of [`query`]: does not block the runtime's thread.
pub(crate) async fn query_async<T: redis::FromRedisValue>(
    port: u16,
    cmd: &redis::Cmd,
) -> Result<T, String> {
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(ADMIN_TIMEOUT))
        .set_response_timeout(Some(ADMIN_TIMEOUT));
    let mut con = client(port)?
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|e| format!("connect to {HOST}:{port}: {e}"))?;
    cmd.query_async(&mut con)
        .await
        .map_err(|e| format!("{HOST}:{port}: {e}"))
}

fn client(port: u16) -> Result<redis::Client, String> {
    redis::Client::open(format!("redis://{HOST}:{port}/")).map_err(|e| e.to_string())
}

/// The `field:value` lines of an `INFO`-style reply, e.g. `CLUSTER INFO`.
pub(crate) fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines().find_map(|line| {
        line.trim()
            .strip_prefix(field)
            .and_then(|rest| rest.strip_prefix(':'))
    })
}

/// Run `cmd` to completion, killing it after `timeout`. `Ok(output)` on exit
/// status 0, else the output with the status.
pub(crate) fn run_bounded(mut cmd: Command, timeout: Duration) -> Result<String, String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {cmd:?}: {e}"))?;
    let started = Instant::now();
    // The outputs of `redis-cli --cluster create` fit the pipe buffers, so
    // reading after exit cannot deadlock.
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Ok(status),
            Ok(None) if started.elapsed() >= timeout => {
                let _ = child.kill();
                let _ = child.wait();
                break Err(format!("killed after {timeout:?}"));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => break Err(e.to_string()),
        }
    };
    let mut output = String::new();
    if let Some(out) = child.stdout.as_mut() {
        let _ = out.read_to_string(&mut output);
    }
    if let Some(err) = child.stderr.as_mut() {
        let _ = err.read_to_string(&mut output);
    }
    match status {
        Ok(status) if status.success() => Ok(output),
        Ok(status) => Err(format!("{cmd:?} exited with {status}:\n{output}")),
        Err(e) => Err(format!("{cmd:?} {e}:\n{output}")),
    }
}
