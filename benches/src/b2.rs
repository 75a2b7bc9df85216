//! B2: one hot key under contention (see `benches/README.md`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::lockers::{self, AcqError, Impl, Kind, Locker};
use crate::monitor::{Counts, Monitor};
use crate::scenarios::{BUDGET, Config, Row, cells_of, start_server};
use crate::stats::Hist;

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
