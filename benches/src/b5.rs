//! B5: the watchdog's cost while holding many locks (see `benches/README.md`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::lockers::{self, Kind};
use crate::monitor::{Counts, Monitor};
use crate::scenarios::{Config, Row, start_server};

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
        Kind::LockcoreSemaphore => Err("B5 measures the lock's renewals only".to_owned()),
    }
}
