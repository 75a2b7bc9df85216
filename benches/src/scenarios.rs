//! The scenarios B1-B5 (B6 is in `b6.rs`). Each one starts its own private redis-server
//! processes.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lockcore_tests::RedisServer;
use tokio::sync::{Mutex, mpsc, watch};

use crate::lockers::{self, AcqError, Budget, Impl, Kind, Locker, with_locker};
use crate::monitor::{Counts, Monitor};
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

fn per_op(total: Duration, ops: u64) -> Option<Duration> {
    (ops > 0 && total > Duration::ZERO).then(|| {
        Duration::from_nanos(u64::try_from(total.as_nanos() / u128::from(ops)).unwrap_or(0))
    })
}

/// This process's CPU time so far: the sum over its threads of `/proc/self/task/*/schedstat`
/// (nanoseconds on a CPU). Linux only; `None` elsewhere.
fn client_cpu() -> Option<Duration> {
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
async fn server_cpu(conn: &mut redis::aio::MultiplexedConnection) -> Option<Duration> {
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

// ---------------------------------------------------------------------------------------------
// B1

pub(crate) const B1_TASKS: [usize; 3] = [1, 8, 64];

/// One B1 cell: how many tasks, and whether the server runs on the client's CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct B1Setup {
    pub(crate) tasks: usize,
    /// The server pinned to the client's CPU (only in pinned runs): the shortest round trip
    /// loopback offers, where a fixed per-call cost weighs the most.
    pub(crate) same_cpu: bool,
}

impl B1Setup {
    pub(crate) const fn tasks(tasks: usize) -> B1Setup {
        B1Setup {
            tasks,
            same_cpu: false,
        }
    }
}

pub(crate) struct B1 {
    pub(crate) setups: Vec<B1Setup>,
    /// Per setup with one task: `PING` round trips on the floor's connection, interleaved with
    /// the rounds.
    pub(crate) rtt: Vec<Option<Cycles>>,
    /// Per implementation, one `Cycles` per setup.
    pub(crate) rows: Vec<Row<Vec<Cycles>>>,
}

impl B1 {
    pub(crate) fn cell(&self, kind: Kind, setup: B1Setup) -> Option<&Cycles> {
        let i = self.setups.iter().position(|&s| s == setup)?;
        cells_of(&self.rows, kind)?.get(i).filter(|c| c.ops > 0)
    }

    /// The floor (`fenced`: the fenced floor) at `setup`: the faster of its two settings.
    pub(crate) fn floor(&self, fenced: bool, setup: B1Setup) -> Option<(Kind, &Cycles)> {
        let both = Kind::floors(fenced).into_iter();
        faster(both.filter_map(|k| Some((k, self.cell(k, setup)?))))
    }
}

pub(crate) async fn b1(cfg: &Config, kinds: &[Kind]) -> Result<B1, String> {
    let server = start_server(cfg);
    let urls = [server.url()];
    let mut imps = Vec::new();
    for &kind in kinds {
        imps.push((kind, lockers::connect(kind, &urls, BUDGET).await));
    }
    let floor_conn = imps.iter().find_map(|(_, imp)| match imp {
        Ok(Impl::Floor(f)) => f.connection(),
        _ => None,
    });
    let floor_conn = floor_conn.ok_or("B1: the floor did not connect")?;
    let mut control = lockers::nodelay_connection(&urls[0]).await?;
    let per_round = cfg.latency_cell / cfg.rounds;
    let mut setups: Vec<B1Setup> = B1_TASKS
        .iter()
        .map(|&tasks| B1Setup {
            tasks,
            same_cpu: false,
        })
        .collect();
    if cfg.pin.is_some() {
        setups.push(B1Setup {
            tasks: 1,
            same_cpu: true,
        });
    }
    let mut rtt: Vec<Option<Cycles>> = setups
        .iter()
        .map(|s| (s.tasks == 1).then(Cycles::new))
        .collect();
    let mut acc: Vec<Vec<Cycles>> = imps
        .iter()
        .map(|_| setups.iter().map(|_| Cycles::new()).collect())
        .collect();
    for (si, setup) in setups.iter().enumerate() {
        if let (true, Some(pin), Some(pid)) = (setup.same_cpu, cfg.pin, server.pid()) {
            crate::pin::pin_pid(pid, pin.client_cpu);
        }
        for round in 0..cfg.rounds {
            if let Some(rtt) = &mut rtt[si] {
                rtt.merge(pings(floor_conn.clone(), per_round, false).await);
            }
            for (i, (_, imp)) in imps.iter().enumerate() {
                let Ok(imp) = imp else { continue };
                let prefix = format!("b1:{i}:{si}:{round}:");
                let tasks = setup.tasks;
                let cpu_before = server_cpu(&mut control).await;
                let client_before = client_cpu();
                let mut c =
                    with_locker!(imp, l => cycles(Arc::clone(l), tasks, per_round, &prefix).await);
                let client_after = client_cpu();
                let cpu_after = server_cpu(&mut control).await;
                if let (Some(a), Some(b)) = (cpu_before, cpu_after) {
                    c.server_cpu = b.saturating_sub(a);
                }
                if let (Some(a), Some(b)) = (client_before, client_after) {
                    c.client_cpu = b.saturating_sub(a);
                }
                acc[i][si].merge(c);
            }
        }
        if let (true, Some(pin), Some(pid)) = (setup.same_cpu, cfg.pin, server.pid()) {
            crate::pin::pin_pid(pid, pin.server_cpu);
        }
    }
    let rows = imps
        .into_iter()
        .zip(acc)
        .map(|((kind, imp), cells)| Row {
            kind,
            cells: imp.map(|_| cells),
        })
        .collect();
    drop(server);
    Ok(B1 { setups, rtt, rows })
}

// ---------------------------------------------------------------------------------------------
// B2

pub(crate) const B2_CONTENDERS: [usize; 2] = [8, 64];
pub(crate) const B2_HOLDS: [Duration; 2] = [Duration::ZERO, Duration::from_millis(1)];

/// The B2 cell of `kind` with `contenders` and `hold`.
pub(crate) fn find_contention(
    b2: &[Row<Vec<Contention>>],
    kind: Kind,
    contenders: usize,
    hold: Duration,
) -> Option<&Contention> {
    cells_of(b2, kind)?
        .iter()
        .find(|c| c.contenders == contenders && c.hold == hold)
}

/// One contention cell.
pub(crate) struct Contention {
    pub(crate) contenders: usize,
    pub(crate) hold: Duration,
    pub(crate) window: Duration,
    /// Acquisitions that returned inside the window, per contender.
    pub(crate) per_contender: Vec<u64>,
    /// All acquisitions, including those that returned after the window while the others
    /// drained; commands are counted over the same span.
    pub(crate) acquisitions: u64,
    /// The wait of every acquire call started in the window (a timed-out call counts with its
    /// full wait).
    pub(crate) waits: Hist,
    pub(crate) timeouts: u64,
    pub(crate) errors: u64,
    pub(crate) first_error: Option<String>,
    pub(crate) commands: Counts,
    /// Mean time from acquire returning to the release call (the hold as slept, ≥ `hold`).
    pub(crate) mean_hold: Duration,
}

impl Contention {
    pub(crate) fn in_window(&self) -> u64 {
        self.per_contender.iter().sum()
    }

    pub(crate) fn per_s(&self) -> f64 {
        self.in_window() as f64 / self.window.as_secs_f64()
    }

    pub(crate) fn client_per_acq(&self) -> Option<f64> {
        (self.acquisitions > 0).then(|| self.commands.client as f64 / self.acquisitions as f64)
    }

    /// The share of the window in which somebody held the lock, from acquisitions/s × the
    /// mean hold: how close the cell is to the most a lock held this long can give.
    pub(crate) fn busy(&self) -> f64 {
        self.per_s() * self.mean_hold.as_secs_f64()
    }

    pub(crate) fn lua_per_acq(&self) -> Option<f64> {
        (self.acquisitions > 0).then(|| self.commands.lua as f64 / self.acquisitions as f64)
    }
}

#[derive(Default)]
struct ContenderStats {
    in_window: u64,
    total: u64,
    held: Duration,
    timeouts: u64,
    errors: u64,
    first_error: Option<String>,
}

pub(crate) async fn b2(cfg: &Config, kinds: &[Kind]) -> Vec<Row<Vec<Contention>>> {
    let mut rows = Vec::new();
    for &kind in kinds {
        let mut cells = Vec::new();
        let mut failed = None;
        'cells: for &contenders in &B2_CONTENDERS {
            for &hold in &B2_HOLDS {
                match b2_cell(cfg, kind, contenders, hold).await {
                    Ok(c) => cells.push(c),
                    Err(e) => {
                        failed = Some(e);
                        break 'cells;
                    }
                }
            }
        }
        rows.push(Row {
            kind,
            cells: failed.map_or(Ok(cells), Err),
        });
    }
    rows
}

async fn b2_cell(
    cfg: &Config,
    kind: Kind,
    contenders: usize,
    hold: Duration,
) -> Result<Contention, String> {
    let server = start_server(cfg);
    let urls = [server.url()];
    let mut monitor = Monitor::start(server.port(), &urls[0]).await?;
    let mut imps = Vec::with_capacity(contenders);
    for _ in 0..contenders {
        imps.push(lockers::connect(kind, &urls, BUDGET).await?);
    }
    let before = monitor.mark().await?;
    // Every contender is of the same kind: unwrap them all as that kind.
    macro_rules! contend_as {
        ($variant:ident) => {
            contend(
                &imps
                    .iter()
                    .filter_map(|i| match i {
                        Impl::$variant(l) => Some(Arc::clone(l)),
                        _ => None,
                    })
                    .collect::<Vec<_>>(),
                hold,
                cfg.contention_cell,
            )
            .await
        };
    }
    let (stats, waits) = match &imps[0] {
        Impl::Floor(_) => return Err("the floor does not contend".to_owned()),
        Impl::Lockcore(_) => contend_as!(Lockcore),
        Impl::Rslock(_) => contend_as!(Rslock),
        Impl::AsyncRedisLock(_) => contend_as!(AsyncRedisLock),
        Impl::Rlock(_) => contend_as!(Rlock),
    };
    // Releases that the peers run in spawned tasks (rlock) must land before the last mark.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let after = monitor.mark().await?;
    drop(imps);
    drop(monitor);
    drop(server);
    let mut cell = Contention {
        contenders,
        hold,
        window: cfg.contention_cell,
        per_contender: stats.iter().map(|s| s.in_window).collect(),
        acquisitions: stats.iter().map(|s| s.total).sum(),
        waits,
        timeouts: stats.iter().map(|s| s.timeouts).sum(),
        errors: stats.iter().map(|s| s.errors).sum(),
        first_error: None,
        commands: after.since(&before),
        mean_hold: Duration::ZERO,
    };
    let held: Duration = stats.iter().map(|s| s.held).sum();
    if cell.acquisitions > 0 {
        cell.mean_hold = held / u32::try_from(cell.acquisitions).unwrap_or(u32::MAX);
    }
    cell.first_error = stats.into_iter().find_map(|s| s.first_error);
    Ok(cell)
}

/// Every contender (its own manager) loops: acquire the hot key, hold, release; until the
/// window ends. Calls still waiting at the end finish (the others have stopped by then).
async fn contend<L: Locker>(
    lockers: &[Arc<L>],
    hold: Duration,
    window: Duration,
) -> (Vec<ContenderStats>, Hist) {
    let start = Instant::now() + Duration::from_millis(20);
    let stop = start + window;
    let key = format!("b2:hot:{}", uuid::Uuid::new_v4().simple());
    let mut handles = Vec::with_capacity(lockers.len());
    for locker in lockers {
        let locker = Arc::clone(locker);
        let key = key.clone();
        handles.push(tokio::spawn(async move {
            let mut s = ContenderStats::default();
            let mut waits = Hist::new();
            tokio::time::sleep_until(start.into()).await;
            while Instant::now() < stop {
                let t0 = Instant::now();
                match locker.acquire(&key).await {
                    Ok(guard) => {
                        let t1 = Instant::now();
                        waits.record(t1 - t0);
                        s.total += 1;
                        if t1 < stop {
                            s.in_window += 1;
                        }
                        if !hold.is_zero() {
                            tokio::time::sleep(hold).await;
                        }
                        s.held += t1.elapsed();
                        if let Err(e) = locker.release(guard).await {
                            s.errors += 1;
                            s.first_error.get_or_insert(format!("release: {e}"));
                        }
                    }
                    Err(AcqError::Timeout) => {
                        waits.record(t0.elapsed());
                        s.timeouts += 1;
                    }
                    Err(AcqError::Failed(e)) => {
                        s.errors += 1;
                        s.first_error.get_or_insert(e);
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                }
            }
            (s, waits)
        }));
    }
    let mut stats = Vec::with_capacity(handles.len());
    let mut waits = Hist::new();
    for h in handles {
        match h.await {
            Ok((s, w)) => {
                waits.add(&w);
                stats.push(s);
            }
            Err(e) => stats.push(ContenderStats {
                errors: 1,
                first_error: Some(format!("task failed: {e}")),
                ..ContenderStats::default()
            }),
        }
    }
    (stats, waits)
}

// ---------------------------------------------------------------------------------------------
// B3

pub(crate) struct Handoffs {
    pub(crate) hist: Hist,
    pub(crate) timeouts: u64,
    pub(crate) errors: u64,
    pub(crate) first_error: Option<String>,
}

pub(crate) struct B3 {
    /// `PING` round trips on a raw TCP_NODELAY connection to the same server, on the same
    /// runtime, taken before each implementation's turn: each after an idle pause like the
    /// holds (the yardstick), and back to back.
    pub(crate) rtt_idle: Cycles,
    pub(crate) rtt_hot: Cycles,
    /// The least a pushed hand-off costs on this machine: see [`raw_handoffs`].
    pub(crate) raw_handoff: Result<Cycles, String>,
    pub(crate) rows: Vec<Row<Handoffs>>,
}

pub(crate) async fn b3(cfg: &Config, kinds: &[Kind]) -> Result<B3, String> {
    let server = start_server(cfg);
    let urls = [server.url()];
    let probe = lockers::nodelay_connection(&urls[0]).await?;
    let (mut rtt_idle, mut rtt_hot) = (Cycles::new(), Cycles::new());
    let raw_handoff = raw_handoffs(&urls[0], cfg).await;
    let mut rows = Vec::new();
    for &kind in kinds {
        rtt_hot.merge(pings(probe.clone(), Duration::from_millis(100), false).await);
        rtt_idle.merge(pings(probe.clone(), cfg.handoff_cell / 6, true).await);
        let cells = async {
            let a = lockers::connect(kind, &urls, BUDGET).await?;
            let b = lockers::connect(kind, &urls, BUDGET).await?;
            Ok::<_, String>(match (&a, &b) {
                (Impl::Lockcore(a), Impl::Lockcore(b)) => ping_pong(a, b, cfg).await,
                (Impl::Rslock(a), Impl::Rslock(b)) => ping_pong(a, b, cfg).await,
                (Impl::AsyncRedisLock(a), Impl::AsyncRedisLock(b)) => ping_pong(a, b, cfg).await,
                (Impl::Rlock(a), Impl::Rlock(b)) => ping_pong(a, b, cfg).await,
                _ => return Err("no hand-off for this implementation".to_owned()),
            })
        }
        .await;
        rows.push(Row { kind, cells });
    }
    drop(server);
    Ok(B3 {
        rtt_idle,
        rtt_hot,
        raw_handoff,
        rows,
    })
}

/// The pushed hand-off floor, in raw redis-rs: the holder's release is one script that deletes
/// the key, sets it to the waiter's token and `PUBLISH`es that token; the waiter, subscribed on
/// its own connection, runs one claim script (compare, `PEXPIRE`, `INCR`) when the message
/// arrives. No queue, no bookkeeping: one waiter, known in advance. A sample is the time from
/// the release call to the claim's reply, after an idle pause like B3's holds.
async fn raw_handoffs(url: &str, cfg: &Config) -> Result<Cycles, String> {
    use futures_util::StreamExt;
    let release = redis::Script::new(
        "redis.call('DEL', KEYS[1]) redis.call('SET', KEYS[1], ARGV[1], 'PX', 500) return redis.call('PUBLISH', ARGV[2], ARGV[1])",
    );
    let claim = redis::Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('PEXPIRE', KEYS[1], 10000) return redis.call('INCR', KEYS[2]) end return 0",
    );
    let client = lockers::nodelay_client(url)?;
    let mut holder = lockers::nodelay_connection(url).await?;
    let mut waiter = lockers::nodelay_connection(url).await?;
    let channel = format!("b3:raw:{}", uuid::Uuid::new_v4().simple());
    let mut pubsub = client.get_async_pubsub().await.map_err(|e| e.to_string())?;
    pubsub
        .subscribe(&channel)
        .await
        .map_err(|e| e.to_string())?;
    let mut messages = pubsub.into_on_message();
    for script in [&release, &claim] {
        script
            .prepare_invoke()
            .load_async(&mut holder)
            .await
            .map_err(|e| e.to_string())?;
    }
    let mut c = Cycles::new();
    let start = Instant::now();
    while start.elapsed() < cfg.handoff_cell && c.ops < cfg.handoff_max as u64 {
        tokio::time::sleep(Duration::from_micros(fastrand::u64(2_000..=10_000))).await;
        let mut invocation = release.key("b3:raw");
        invocation.arg("waiter").arg(&channel);
        let t0 = Instant::now();
        let released = invocation.invoke_async::<i64>(&mut holder);
        let claimed = async {
            if messages.next().await.is_none() {
                return Err("subscription closed".to_owned());
            }
            let fence = claim
                .key("b3:raw")
                .key("b3:raw:fence")
                .arg("waiter")
                .invoke_async::<i64>(&mut waiter)
                .await
                .map_err(|e| e.to_string())?;
            if fence > 0 {
                Ok(t0.elapsed())
            } else {
                Err("claim found another token".to_owned())
            }
        };
        match tokio::time::timeout(Duration::from_secs(1), async {
            tokio::join!(released, claimed)
        })
        .await
        {
            Ok((Ok(_), Ok(took))) => {
                c.hist.record(took);
                c.ops += 1;
            }
            Ok((Err(e), _)) => {
                c.errors += 1;
                c.first_error.get_or_insert(e.to_string());
            }
            Ok((_, Err(e))) => {
                c.errors += 1;
                c.first_error.get_or_insert(e);
            }
            Err(_) => return Err("raw hand-off: no wake-up within 1 s".to_owned()),
        }
    }
    c.elapsed = start.elapsed();
    Ok(c)
}

/// Two contenders with their own managers take turns on one key. The holder tells the other
/// that it holds the lock, so the other calls acquire and waits; the holder keeps it 2-10 ms
/// (uniform), notes the time, and calls release. A sample is the time from that note to the
/// waiter's acquire returning. The releaser does not contend again until the waiter holds the
/// lock, so every sample is a hand-off to the other contender.
pub(crate) async fn ping_pong<L: Locker>(a: &Arc<L>, b: &Arc<L>, cfg: &Config) -> Handoffs {
    let key = format!("b3:{}", uuid::Uuid::new_v4().simple());
    let released_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let samples = Arc::new(AtomicUsize::new(0));
    let deadline = Instant::now() + cfg.handoff_cell;
    let (a_tx, a_rx) = mpsc::channel(1);
    let (b_tx, b_rx) = mpsc::channel(1);
    let first = tokio::spawn(participant(
        Arc::clone(a),
        key.clone(),
        true,
        b_tx,
        a_rx,
        Arc::clone(&released_at),
        Arc::clone(&samples),
        (deadline, cfg.handoff_max),
    ));
    let second = tokio::spawn(participant(
        Arc::clone(b),
        key,
        false,
        a_tx,
        b_rx,
        released_at,
        samples,
        (deadline, cfg.handoff_max),
    ));
    let mut out = Handoffs {
        hist: Hist::new(),
        timeouts: 0,
        errors: 0,
        first_error: None,
    };
    for h in [first, second] {
        match h.await {
            Ok(p) => {
                out.hist.add(&p.hist);
                out.timeouts += p.timeouts;
                out.errors += p.errors;
                if out.first_error.is_none() {
                    out.first_error = p.first_error;
                }
            }
            Err(e) => {
                out.errors += 1;
                out.first_error.get_or_insert(format!("task failed: {e}"));
            }
        }
    }
    out
}

#[allow(clippy::too_many_arguments)]
async fn participant<L: Locker>(
    locker: Arc<L>,
    key: String,
    first: bool,
    tell_other: mpsc::Sender<()>,
    mut other_holds: mpsc::Receiver<()>,
    released_at: Arc<Mutex<Option<Instant>>>,
    samples: Arc<AtomicUsize>,
    (deadline, max): (Instant, usize),
) -> Handoffs {
    let mut out = Handoffs {
        hist: Hist::new(),
        timeouts: 0,
        errors: 0,
        first_error: None,
    };
    if !first && other_holds.recv().await.is_none() {
        return out;
    }
    loop {
        let guard = match locker.acquire(&key).await {
            Ok(g) => g,
            Err(AcqError::Timeout) => {
                out.timeouts += 1;
                return out;
            }
            Err(AcqError::Failed(e)) => {
                out.errors += 1;
                out.first_error = Some(e);
                return out;
            }
        };
        let acquired = Instant::now();
        if let Some(t0) = released_at.lock().await.take() {
            out.hist.record(acquired - t0);
            samples.fetch_add(1, Ordering::Relaxed);
        }
        let done = Instant::now() >= deadline || samples.load(Ordering::Relaxed) >= max;
        if !done && tell_other.send(()).await.is_err() {
            // The other one has stopped.
            let _ = locker.release(guard).await;
            return out;
        }
        tokio::time::sleep(Duration::from_micros(fastrand::u64(2_000..=10_000))).await;
        if !done {
            *released_at.lock().await = Some(Instant::now());
        }
        if let Err(e) = locker.release(guard).await {
            out.errors += 1;
            out.first_error.get_or_insert(format!("release: {e}"));
        }
        if done || other_holds.recv().await.is_none() {
            return out;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// B4

pub(crate) const B4_NODES: [usize; 3] = [1, 3, 5];

/// B4's floor at `B4_NODES[ni]`: the faster of its two settings.
pub(crate) fn b4_floor(b4: &[Row<Vec<Cycles>>], ni: usize) -> Option<(Kind, &Cycles)> {
    let both = Kind::floors(false).into_iter();
    faster(both.filter_map(|k| Some((k, cells_of(b4, k)?.get(ni)?))))
}

pub(crate) async fn b4(cfg: &Config, kinds: &[Kind]) -> Vec<Row<Vec<Cycles>>> {
    let servers: Vec<RedisServer> = (0..5).map(|_| start_server(cfg)).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let mut imps = Vec::new();
    for &kind in kinds {
        let mut per_n = Vec::new();
        for &n in &B4_NODES {
            per_n.push(lockers::connect(kind, &urls[..n], BUDGET).await);
        }
        let per_n: Result<Vec<Impl>, String> = per_n.into_iter().collect();
        imps.push((kind, per_n));
    }
    let per_round = cfg.latency_cell / cfg.rounds;
    let mut acc: Vec<Vec<Cycles>> = imps
        .iter()
        .map(|_| B4_NODES.iter().map(|_| Cycles::new()).collect())
        .collect();
    for round in 0..cfg.rounds {
        for (ni, n) in B4_NODES.iter().enumerate() {
            for (i, (_, per_n)) in imps.iter().enumerate() {
                let Ok(per_n) = per_n else { continue };
                let prefix = format!("b4:{i}:{n}:{round}:");
                let c = with_locker!(&per_n[ni], l => cycles(Arc::clone(l), 1, per_round, &prefix).await);
                acc[i][ni].merge(c);
            }
        }
    }
    drop(servers);
    imps.into_iter()
        .zip(acc)
        .map(|((kind, per_n), cells)| Row {
            kind,
            cells: per_n.map(|_| cells),
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// B5

pub(crate) const B5_LOCKS: [usize; 3] = [1, 100, 1000];
pub(crate) const B5_TTL: Duration = Duration::from_secs(3);

pub(crate) struct Renewals {
    pub(crate) locks: usize,
    pub(crate) window: Duration,
    pub(crate) commands: Counts,
    /// Locks found lost (or not held) at the end of the window.
    pub(crate) lost: usize,
}

impl Renewals {
    pub(crate) fn client_per_s(&self) -> f64 {
        self.commands.client as f64 / self.window.as_secs_f64()
    }

    pub(crate) fn lua_per_s(&self) -> f64 {
        self.commands.lua as f64 / self.window.as_secs_f64()
    }
}

/// For each lock count, all implementations at once, each on its own server (the figures are
/// command counts, not latencies).
pub(crate) async fn b5(cfg: &Config, kinds: &[Kind]) -> Vec<Row<Vec<Renewals>>> {
    let mut acc: Vec<Result<Vec<Renewals>, String>> =
        kinds.iter().map(|_| Ok(Vec::new())).collect();
    for &locks in &B5_LOCKS {
        let runs = kinds.iter().map(|&kind| hold_many(cfg, kind, locks));
        let results = futures_util::future::join_all(runs).await;
        for (slot, result) in acc.iter_mut().zip(results) {
            if let Ok(cells) = slot {
                match result {
                    Ok(r) => cells.push(r),
                    Err(e) => *slot = Err(e),
                }
            }
        }
    }
    kinds
        .iter()
        .zip(acc)
        .map(|(&kind, cells)| Row { kind, cells })
        .collect()
}

async fn hold_many(cfg: &Config, kind: Kind, locks: usize) -> Result<Renewals, String> {
    let server = start_server(cfg);
    let url = server.url();
    let mut monitor = Monitor::start(server.port(), &url).await?;
    let keys: Vec<String> = (0..locks).map(|i| format!("b5:{i}")).collect();
    let window = cfg.watchdog_window;
    let settle = cfg.watchdog_settle;
    let counted = |before: Counts, after: Counts, lost: usize, window: Duration| Renewals {
        locks,
        window,
        commands: after.since(&before),
        lost,
    };
    match kind {
        Kind::Lockcore | Kind::LockcoreHandoff | Kind::LockcoreFencingOff => {
            let (manager, opts) =
                lockers::Lockcore::watchdog(&url, B5_TTL, kind != Kind::Lockcore).await?;
            let mut guards = Vec::with_capacity(locks);
            for key in &keys {
                guards.push(
                    manager
                        .acquire(key, &opts)
                        .await
                        .map_err(|e| e.to_string())?,
                );
            }
            tokio::time::sleep(settle).await;
            let before = monitor.mark().await?;
            let t0 = Instant::now();
            tokio::time::sleep(window).await;
            let after = monitor.mark().await?;
            let window = t0.elapsed();
            let lost = guards.iter().filter(|g| !g.is_held()).count();
            for g in guards {
                let _ = g.release().await;
            }
            Ok(counted(before, after, lost, window))
        }
        Kind::AsyncRedisLock => {
            let (locker, opts) = lockers::Arl::watchdog(&url, B5_TTL).await?;
            let mut held = Vec::with_capacity(locks);
            for key in &keys {
                held.push(
                    locker
                        .acquire_with_options(&opts, key.as_str())
                        .await
                        .map_err(|e| e.to_string())?,
                );
            }
            tokio::time::sleep(settle).await;
            let before = monitor.mark().await?;
            let t0 = Instant::now();
            tokio::time::sleep(window).await;
            let after = monitor.mark().await?;
            let window = t0.elapsed();
            let lost = held.iter().filter(|l| l.is_lost()).count();
            for l in held {
                let _ = l.release().await;
            }
            Ok(counted(before, after, lost, window))
        }
        Kind::Rlock => {
            let (rlock, opts) = lockers::Rlock::watchdog(&url, B5_TTL).await?;
            let mut held = Vec::with_capacity(locks);
            for key in &keys {
                held.push(
                    rlock
                        .acquire_mutex_with_options(key, opts.clone())
                        .await
                        .map_err(|e| e.to_string())?,
                );
            }
            tokio::time::sleep(settle).await;
            let before = monitor.mark().await?;
            let t0 = Instant::now();
            tokio::time::sleep(window).await;
            let after = monitor.mark().await?;
            let window = t0.elapsed();
            let lost = held
                .iter()
                .filter(|g| g.lease_state() != rlock::LeaseState::Active)
                .count();
            for mut g in held {
                let _ = g.release().await;
            }
            Ok(counted(before, after, lost, window))
        }
        Kind::Rslock => {
            // rslock renews only inside `LockManager::using(resource, ttl, routine)`: one task
            // per lock, each running a routine that waits for the end of the window.
            let manager = lockers::Rslock::manager(&url)?;
            let (stop_tx, stop_rx) = watch::channel(false);
            let started = Arc::new(AtomicUsize::new(0));
            let mut tasks = Vec::with_capacity(locks);
            for key in keys {
                let manager = manager.clone();
                let mut stop = stop_rx.clone();
                let started = Arc::clone(&started);
                tasks.push(tokio::spawn(async move {
                    manager
                        .using(key.as_bytes(), B5_TTL, async move || {
                            started.fetch_add(1, Ordering::Relaxed);
                            let _ = stop.wait_for(|s| *s).await;
                        })
                        .await
                }));
            }
            let t_acq = Instant::now();
            while started.load(Ordering::Relaxed) < locks {
                if t_acq.elapsed() > Duration::from_secs(30) {
                    return Err("rslock: locks not acquired within 30 s".to_owned());
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            tokio::time::sleep(settle).await;
            let before = monitor.mark().await?;
            let t0 = Instant::now();
            tokio::time::sleep(window).await;
            let after = monitor.mark().await?;
            let window = t0.elapsed();
            let _ = stop_tx.send(true);
            let mut lost = 0;
            for t in tasks {
                if !matches!(t.await, Ok(Ok(()))) {
                    lost += 1;
                }
            }
            Ok(counted(before, after, lost, window))
        }
        Kind::Floor | Kind::FloorNagle | Kind::FloorFenced | Kind::FloorFencedNagle => {
            Err("the floor has no renewal".to_owned())
        }
    }
}
