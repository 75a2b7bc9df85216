//! Operation histories, Jepsen style: every step of every operation as one JSON line, with a
//! time on one clock that all processes on this machine share (`CLOCK_MONOTONIC`, in ns), so
//! that the histories of several processes merge into one.
//!
//! A step is an `invoke` followed by at most one completion: `ok`, `fail` (it did not happen),
//! or `unknown` (it may have happened: a lost reply, a dropped future). A step with an invoke
//! and no completion (a killed process) reads as `unknown` too.

use std::fs::File;
use std::io::{BufRead as _, BufReader, Write as _};
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Nanoseconds on `CLOCK_MONOTONIC`: comparable across the processes of one machine (and equal
/// to what `std::time::Instant` reads on Linux).
pub fn now_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(nanos)
}

/// [`now_ns`] of a `tokio::time::Instant` (e.g. a guard's deadline), saturating at 0.
///
/// Never later than the true value: the ns clock is read *before* the `Instant`, so a pause in
/// between (a `SIGSTOP`) moves the result earlier, which only shortens a lease in the history.
pub fn instant_ns(at: tokio::time::Instant) -> u64 {
    let now_ns = now_ns();
    let now = tokio::time::Instant::now();
    if at >= now {
        now_ns.saturating_add(duration_ns(at - now))
    } else {
        now_ns.saturating_sub(duration_ns(now - at))
    }
}

/// A duration in ns, saturating.
pub fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// What a step does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fun {
    /// Acquire the lock on `key`.
    Acquire,
    /// Raise the resource's fence to the holder's token and read its value (a fenced read).
    Claim,
    /// Write `value` to the resource (fenced with `fencing_token`, or plain in the control).
    Write,
    /// Release the lock (or, with `note = "dropped"`, the guard was dropped).
    Release,
}

/// Where a step is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// It started.
    Invoke,
    /// It happened.
    Ok,
    /// It did not happen.
    Fail,
    /// It may have happened.
    Unknown,
}

/// One line of a history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// [`now_ns`] when the step started (`invoke`) or ended.
    pub t_ns: u64,
    /// The worker process (stable across restarts of that worker).
    pub process: u32,
    /// The restart count of that worker (0 for the first process).
    pub incarnation: u32,
    /// The task inside the process.
    pub task: u32,
    /// The operation number inside the task: one lock acquisition and what it did.
    pub op: u64,
    /// The lock key (without prefix).
    pub key: String,
    /// What the step does.
    pub fun: Fun,
    /// Where the step is.
    pub phase: Phase,
    /// The lock token (acquire `ok`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// The fencing token of the lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fencing_token: Option<u64>,
    /// The lease's local deadline (acquire `ok`), in [`now_ns`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ns: Option<u64>,
    /// The resource of a claim or write: `"counter"` or `"row"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    /// The value read (claim `ok`, and on the write: the value it increments).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read: Option<i64>,
    /// The fencing token of the write that made the value read (0: never written).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writer: Option<u64>,
    /// The value written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<i64>,
    /// Free text: an error, `"dropped"`, `"attribute"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Event {
    /// A step of `(process, incarnation, task, op)` on `key`, stamped now; set the other fields
    /// with struct update syntax.
    pub fn now(id: OpId, key: &str, fun: Fun, phase: Phase) -> Event {
        Event {
            t_ns: now_ns(),
            process: id.process,
            incarnation: id.incarnation,
            task: id.task,
            op: id.op,
            key: key.to_owned(),
            fun,
            phase,
            token: None,
            fencing_token: None,
            deadline_ns: None,
            resource: None,
            read: None,
            writer: None,
            value: None,
            note: None,
        }
    }

    /// The operation this step belongs to.
    pub fn id(&self) -> OpId {
        OpId {
            process: self.process,
            incarnation: self.incarnation,
            task: self.task,
            op: self.op,
        }
    }
}

/// Names one operation across all histories.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpId {
    /// The worker process.
    pub process: u32,
    /// Its restart count.
    pub incarnation: u32,
    /// The task.
    pub task: u32,
    /// The operation inside the task.
    pub op: u64,
}

/// Appends events to one history file, one JSON line each, written through at once (no
/// user-space buffer), so that a killed process loses at most the line it was writing.
#[derive(Debug)]
pub struct HistoryWriter {
    file: Mutex<File>,
}

impl HistoryWriter {
    /// Creates (or truncates) the file at `path`.
    ///
    /// # Errors
    /// When the file cannot be created.
    pub fn create(path: &Path) -> std::io::Result<HistoryWriter> {
        Ok(HistoryWriter {
            file: Mutex::new(File::create(path)?),
        })
    }

    /// Writes `event` as one line. A failed write is reported on stderr and otherwise ignored:
    /// the checker then sees an incomplete step, as after a kill.
    pub fn record(&self, event: &Event) {
        let mut line = match serde_json::to_vec(event) {
            Ok(line) => line,
            Err(e) => {
                eprintln!("history: cannot encode {event:?}: {e}");
                return;
            }
        };
        line.push(b'\n');
        let mut file = self
            .file
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Err(e) = file.write_all(&line) {
            eprintln!("history: write failed: {e}");
        }
    }
}

/// Reads and merges the histories in `paths`, sorted by time. A line that does not parse (the
/// torn last line of a killed process) is skipped and counted.
///
/// # Errors
/// When a file cannot be opened or read.
pub fn read_histories(paths: &[impl AsRef<Path>]) -> std::io::Result<(Vec<Event>, usize)> {
    let mut events = Vec::new();
    let mut torn = 0;
    for path in paths {
        for line in BufReader::new(File::open(path)?).lines() {
            match serde_json::from_str::<Event>(&line?) {
                Ok(event) => events.push(event),
                Err(_) => torn += 1,
            }
        }
    }
    events.sort_by_key(|e| e.t_ns);
    Ok((events, torn))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip_as_json_lines() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("h.jsonl");
        let writer = HistoryWriter::create(&path).unwrap_or_else(|e| panic!("{e}"));
        let id = OpId {
            process: 1,
            incarnation: 0,
            task: 2,
            op: 3,
        };
        let invoke = Event::now(id, "hot", Fun::Acquire, Phase::Invoke);
        let ok = Event {
            fencing_token: Some(7),
            ..Event::now(id, "hot", Fun::Acquire, Phase::Ok)
        };
        writer.record(&ok);
        writer.record(&invoke);
        let (events, torn) = read_histories(&[&path]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(torn, 0);
        assert_eq!(events, vec![invoke, ok]);
        assert!(now_ns() >= events[1].t_ns);
    }
}
