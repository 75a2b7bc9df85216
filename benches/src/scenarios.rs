//! What the scenarios (`b1.rs` .. `b6.rs`) share: the run's configuration, the measured cycle
//! of acquire+release, CPU accounting and `PING` yardsticks. Each scenario starts its own
//! private redis-server processes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lockcore_tests::RedisServer;

use crate::lockers::{Budget, Kind, Locker};
use crate::stats::Hist;

/// Durations and sizes of one run.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// Rounds that B1 and B4 interleave the implementations over, so that a burst of machine
    /// noise hits all of them alike.
    pub(crate) rounds: u32,
    /// B1 and B4: measured time per implementation and cell, over all rounds.
    pub(crate) latency_cell: Duration,
    /// B2: measured time per cell.
    pub(crate) contention_cell: Duration,
    /// B3: time per implementation, and the most hand-offs.
    pub(crate) handoff_cell: Duration,
    pub(crate) handoff_max: usize,
    /// B5: wait after the last acquire, then the counted window.
    pub(crate) watchdog_settle: Duration,
    pub(crate) watchdog_window: Duration,
    /// Where the client and the servers run, when pinned.
    pub(crate) pin: Option<crate::pin::Pinning>,
}

impl Config {
    pub(crate) fn full() -> Config {
        Config {
            rounds: 5,
            latency_cell: Duration::from_millis(1500),
            contention_cell: Duration::from_secs(3),
            handoff_cell: Duration::from_secs(3),
            handoff_max: 500,
            watchdog_settle: Duration::from_millis(750),
            watchdog_window: Duration::from_secs(6),
            pin: None,
        }
    }

    pub(crate) fn quick() -> Config {
        Config {
            rounds: 2,
            latency_cell: Duration::from_millis(300),
            contention_cell: Duration::from_millis(500),
            handoff_cell: Duration::from_millis(500),
            handoff_max: 100,
            watchdog_settle: Duration::from_millis(500),
            watchdog_window: Duration::from_millis(1500),
            pin: None,
        }
    }
}

/// A private redis-server, pinned to the server CPU when the run pins.
pub(crate) fn start_server(cfg: &Config) -> RedisServer {
    let server = RedisServer::start();
    if let (Some(pin), Some(pid)) = (cfg.pin, server.pid()) {
        crate::pin::pin_pid(pid, pin.server_cpu);
    }
    server
}

/// TTL and wait budget of B1-B4: the same for every implementation.
pub(crate) const BUDGET: Budget = Budget {
    ttl: Duration::from_secs(10),
    wait: Duration::from_secs(5),
};

/// What a sequence of acquire+release cycles measured.
#[derive(Clone)]
pub(crate) struct Cycles {
    pub(crate) hist: Hist,
    pub(crate) ops: u64,
    pub(crate) elapsed: Duration,
    pub(crate) errors: u64,
    pub(crate) first_error: Option<String>,
    /// CPU time the redis-server process spent meanwhile (user + sys), when measured.
    pub(crate) server_cpu: Duration,
    /// CPU time this process spent meanwhile (all threads), when measured.
    pub(crate) client_cpu: Duration,
}

impl Cycles {
    pub(crate) fn new() -> Cycles {
        Cycles {
            hist: Hist::new(),
            ops: 0,
            elapsed: Duration::ZERO,
            errors: 0,
            first_error: None,
            server_cpu: Duration::ZERO,
            client_cpu: Duration::ZERO,
        }
    }

    pub(crate) fn merge(&mut self, other: Cycles) {
        self.hist.add(&other.hist);
        self.ops += other.ops;
        self.elapsed += other.elapsed;
        self.server_cpu += other.server_cpu;
        self.client_cpu += other.client_cpu;
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
    }

    pub(crate) fn ops_per_s(&self) -> Option<f64> {
        (self.elapsed > Duration::ZERO).then(|| self.ops as f64 / self.elapsed.as_secs_f64())
    }

    /// Server CPU time per sample.
    pub(crate) fn server_cpu_per_op(&self) -> Option<Duration> {
        per_op(self.server_cpu, self.ops)
    }

    /// Client CPU time per sample.
    pub(crate) fn client_cpu_per_op(&self) -> Option<Duration> {
        per_op(self.client_cpu, self.ops)
    }
}

pub(crate) fn per_op(total: Duration, ops: u64) -> Option<Duration> {
    (ops > 0 && total > Duration::ZERO).then(|| {
        Duration::from_nanos(u64::try_from(total.as_nanos() / u128::from(ops)).unwrap_or(0))
    })
}

/// This process's CPU time so far: the sum over its threads of `/proc/self/task/*/schedstat`
/// (nanoseconds on a CPU). Linux only; `None` elsewhere.
pub(crate) fn client_cpu() -> Option<Duration> {
    let mut total = 0u64;
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let Ok(task) = task else { continue };
        let Ok(stat) = std::fs::read_to_string(task.path().join("schedstat")) else {
            continue;
        };
        if let Some(ns) = stat
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<u64>().ok())
        {
            total = total.saturating_add(ns);
        }
    }
    Some(Duration::from_nanos(total))
}

/// The redis-server process's CPU time so far (`INFO cpu`: `used_cpu_sys` + `used_cpu_user`).
pub(crate) async fn server_cpu(conn: &mut redis::aio::MultiplexedConnection) -> Option<Duration> {
    let info: String = redis::cmd("INFO").arg("cpu").query_async(conn).await.ok()?;
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse::<f64>().ok())
    };
    let secs = field("used_cpu_sys:")? + field("used_cpu_user:")?;
    Some(Duration::from_secs_f64(secs.max(0.0)))
}

/// `tasks` tasks share `locker`, each on its own key, acquiring and releasing in a loop for
/// `dur`. One sample = one acquire+release.
pub(crate) async fn cycles<L: Locker>(
    locker: Arc<L>,
    tasks: usize,
    dur: Duration,
    prefix: &str,
) -> Cycles {
    let start = Instant::now();
    let deadline = start + dur;
    let mut handles = Vec::with_capacity(tasks);
    for t in 0..tasks {
        let locker = Arc::clone(&locker);
        let key = format!("{prefix}{t}");
        handles.push(tokio::spawn(async move {
            let mut c = Cycles::new();
            while Instant::now() < deadline {
                let t0 = Instant::now();
                let result = match locker.acquire(&key).await {
                    Ok(guard) => locker.release(guard).await,
                    Err(e) => Err(format!("{e:?}")),
                };
                match result {
                    Ok(()) => {
                        c.hist.record(t0.elapsed());
                        c.ops += 1;
                    }
                    Err(e) => {
                        c.errors += 1;
                        c.first_error.get_or_insert(e);
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                }
            }
            c
        }));
    }
    let mut total = Cycles::new();
    for h in handles {
        match h.await {
            Ok(c) => total.merge(c),
            Err(e) => {
                total.errors += 1;
                total.first_error.get_or_insert(format!("task failed: {e}"));
            }
        }
    }
    total.elapsed = start.elapsed();
    total
}

/// Round trips of `PING` on one connection, one at a time, for `dur`; with `idle`, each after
/// a pause like B3's holds (2-10 ms, uniform), otherwise back to back.
pub(crate) async fn pings(
    mut conn: redis::aio::MultiplexedConnection,
    dur: Duration,
    idle: bool,
) -> Cycles {
    let mut c = Cycles::new();
    let start = Instant::now();
    while start.elapsed() < dur {
        if idle {
            tokio::time::sleep(Duration::from_micros(fastrand::u64(2_000..=10_000))).await;
        }
        let t0 = Instant::now();
        let reply: redis::RedisResult<String> = redis::cmd("PING").query_async(&mut conn).await;
        match reply {
            Ok(_) => {
                c.hist.record(t0.elapsed());
                c.ops += 1;
            }
            Err(e) => {
                c.errors += 1;
                c.first_error.get_or_insert(e.to_string());
            }
        }
    }
    c.elapsed = start.elapsed();
    c
}

/// One implementation's row: its cells, or why it could not run.
pub(crate) struct Row<T> {
    pub(crate) kind: Kind,
    pub(crate) cells: Result<T, String>,
}

/// The cells of `kind` in `rows`, when it ran.
pub(crate) fn cells_of<T>(rows: &[Row<T>], kind: Kind) -> Option<&T> {
    rows.iter().find(|r| r.kind == kind)?.cells.as_ref().ok()
}

/// The faster (more ops/s) of some implementations' cells: how "the floor" is chosen from its
/// two TCP_NODELAY settings.
pub(crate) fn faster<'a>(
    cells: impl Iterator<Item = (Kind, &'a Cycles)>,
) -> Option<(Kind, &'a Cycles)> {
    let rate = |c: &Cycles| c.ops_per_s().unwrap_or(0.0);
    cells.max_by(|a, b| rate(a.1).total_cmp(&rate(b.1)))
}
