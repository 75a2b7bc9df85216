//! Counting the commands a client sends, with `MONITOR`.
//!
//! `INFO stats` `total_commands_processed` and `INFO commandstats` both count the commands a
//! Lua script runs through `redis.call` (checked against `MONITOR` on redis-server 7.0: one
//! `EVAL` running `SET` and `INCR` adds 3 to `total_commands_processed`). A lock built on
//! scripts would look three times as chatty as one sending plain commands. So each counted
//! scenario runs on a fresh server with a `MONITOR` connection, and the stream is split by
//! source: lines tagged `[db lua]` are script-internal calls, all others are commands a client
//! sent. Window edges are marked with an `ECHO` from a control connection, so that only the
//! commands between two marks count. As a cross-check, client + script-internal calls must add
//! up to the `total_commands_processed` delta.
//!
//! `MONITOR` costs the server a little per line (one formatted line per command, script-internal
//! calls included), so it weighs more on implementations that do more work inside scripts.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::monitor_line::{Line, MARK_PREFIX, classify_line};

/// Commands seen between two marks.
#[derive(Debug, Clone, Default)]
pub(crate) struct Counts {
    /// Commands sent by clients.
    pub(crate) client: u64,
    /// Commands run by Lua scripts (`redis.call`).
    pub(crate) lua: u64,
    /// Client commands by name.
    pub(crate) by_command: BTreeMap<String, u64>,
    /// `total_commands_processed` at the mark (read with `INFO`, which is not counted above).
    pub(crate) total_processed: u64,
}

impl Counts {
    /// What happened between `earlier` and `self`.
    pub(crate) fn since(&self, earlier: &Counts) -> Counts {
        let mut by_command = self.by_command.clone();
        for (name, n) in &earlier.by_command {
            if let Some(v) = by_command.get_mut(name) {
                *v = v.saturating_sub(*n);
            }
        }
        by_command.retain(|_, n| *n > 0);
        Counts {
            client: self.client.saturating_sub(earlier.client),
            lua: self.lua.saturating_sub(earlier.lua),
            by_command,
            total_processed: self.total_processed.saturating_sub(earlier.total_processed),
        }
    }

    /// `total_commands_processed` minus what `MONITOR` saw, minus our own marks and `INFO`s:
    /// zero when the stream missed nothing.
    pub(crate) fn unexplained(&self) -> i64 {
        // `total_commands_processed` is read before each mark's ECHO, so the delta also holds
        // the first mark's INFO and ECHO, which are not counted in `client`.
        let own = 2;
        i64::try_from(self.total_processed).unwrap_or(i64::MAX)
            - i64::try_from(self.client + self.lua + own).unwrap_or(i64::MAX)
    }

    /// "EVALSHA 2.00, SET 0.50" per `per` units.
    pub(crate) fn breakdown(&self, per: f64) -> String {
        if per <= 0.0 {
            return "-".to_owned();
        }
        let mut parts: Vec<(&String, &u64)> = self.by_command.iter().collect();
        parts.sort_by(|a, b| b.1.cmp(a.1));
        parts
            .iter()
            .map(|(name, n)| format!("{name} {:.2}", **n as f64 / per))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[derive(Default)]
struct State {
    counts: Counts,
    /// Marks seen so far, with the counts at each.
    marks: BTreeMap<u64, Counts>,
    failed: Option<String>,
}

/// A `MONITOR` connection to one server, counting commands by source.
pub(crate) struct Monitor {
    state: Arc<Mutex<State>>,
    seen: Arc<Notify>,
    control: MultiplexedConnection,
    next_mark: u64,
    reader: JoinHandle<()>,
}

impl Monitor {
    pub(crate) async fn start(port: u16, url: &str) -> Result<Monitor, String> {
        let mut stream = TcpStream::connect(("127.0.0.1", port))
            .await
            .map_err(|e| format!("monitor connect: {e}"))?;
        stream
            .write_all(b"MONITOR\r\n")
            .await
            .map_err(|e| format!("monitor: {e}"))?;
        let mut lines = BufReader::new(stream);
        let mut first = Vec::new();
        lines
            .read_until(b'\n', &mut first)
            .await
            .map_err(|e| format!("monitor: {e}"))?;
        if !first.starts_with(b"+OK") {
            return Err(format!(
                "MONITOR answered {:?}",
                String::from_utf8_lossy(&first)
            ));
        }
        let state = Arc::new(Mutex::new(State::default()));
        let seen = Arc::new(Notify::new());
        let reader = tokio::spawn(read_stream(lines, Arc::clone(&state), Arc::clone(&seen)));
        let control = crate::lockers::nodelay_connection(url).await?;
        Ok(Monitor {
            state,
            seen,
            control,
            next_mark: 0,
            reader,
        })
    }

    /// Sends a mark through the server and returns the counts of everything before it.
    pub(crate) async fn mark(&mut self) -> Result<Counts, String> {
        let id = self.next_mark;
        self.next_mark += 1;
        let info: String = redis::cmd("INFO")
            .arg("stats")
            .query_async(&mut self.control)
            .await
            .map_err(|e| e.to_string())?;
        let total = info
            .lines()
            .find_map(|l| l.strip_prefix("total_commands_processed:"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .ok_or("INFO stats has no total_commands_processed")?;
        let _: String = redis::cmd("ECHO")
            .arg(format!("{MARK_PREFIX}{id}"))
            .query_async(&mut self.control)
            .await
            .map_err(|e| e.to_string())?;
        let wait = async {
            loop {
                let notified = self.seen.notified();
                {
                    let state = lock(&self.state);
                    if let Some(failed) = &state.failed {
                        return Err(failed.clone());
                    }
                    if let Some(counts) = state.marks.get(&id) {
                        let mut counts = counts.clone();
                        counts.total_processed = total;
                        return Ok(counts);
                    }
                }
                notified.await;
            }
        };
        tokio::time::timeout(Duration::from_secs(30), wait)
            .await
            .map_err(|_| "the MONITOR stream did not show the mark within 30 s".to_owned())?
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

async fn read_stream(mut lines: BufReader<TcpStream>, state: Arc<Mutex<State>>, seen: Arc<Notify>) {
    let mut line = Vec::with_capacity(256);
    loop {
        line.clear();
        match lines.read_until(b'\n', &mut line).await {
            Ok(0) => {
                lock(&state).failed = Some("the MONITOR connection closed".to_owned());
                seen.notify_waiters();
                return;
            }
            Ok(_) => {}
            Err(e) => {
                lock(&state).failed = Some(format!("MONITOR read: {e}"));
                seen.notify_waiters();
                return;
            }
        }
        let Some(parsed) = classify_line(&line) else {
            continue;
        };
        let mut st = lock(&state);
        match parsed {
            Line::Mark(id) => {
                let snapshot = st.counts.clone();
                st.marks.insert(id, snapshot);
                drop(st);
                seen.notify_waiters();
            }
            Line::Lua => st.counts.lua += 1,
            Line::Client(name) => {
                st.counts.client += 1;
                *st.counts.by_command.entry(name).or_insert(0) += 1;
            }
        }
    }
}
