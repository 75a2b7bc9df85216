//! The watchdog: one renewal scheduler per [`LockManager`](crate::manager::LockManager) that keeps the
//! leases of live guards from expiring.
//!
//! # Behavior
//! - A guard acquired with [`LockOptions::watchdog`](crate::options::LockOptions::watchdog) on is
//!   registered here; its lease is renewed about every ttl/3 with a compare-and-`PEXPIRE` that
//!   sets the TTL and never re-creates a missing key.
//! - Renewals due within the next ttl/6 are sent together. The backend splits them into groups
//!   that are renewed independently (on Redis Cluster one group per hash slot, as a script's
//!   keys must share a slot; otherwise one group), and each group goes out in script calls
//!   (batches) of at most [`MAX_BATCH`] keys. The command rate grows with the number of
//!   batches, not of held locks.
//! - A lease's renewal depends only on its own shard. The scheduler never waits for a reply:
//!   each batch is sent by a task of its own, which records its leases' results and wakes the
//!   scheduler, and the scheduler keeps planning the other leases meanwhile. So a cluster shard
//!   that does not answer costs only the leases whose keys it serves. A lease is in at most one
//!   batch at a time, and a batch waits for its reply at most until the latest deadline of its
//!   leases (a later reply saves none of them). Under Redlock a batch goes to every node in
//!   parallel, each bounded by the node timeout.
//! - Releasing or dropping the guard unregisters it at once (a short `std` mutex section; it
//!   never waits on the network); a batch not yet sent leaves it out. A renewal already on the
//!   wire cannot re-create or extend another holder's key, because it compares the token.
//! - A token mismatch, a missing key or a key of another type marks the lease lost (only that
//!   lease: the others of its batch are renewed). A Redis error (a timeout, or a fast refusal
//!   such as `NOPERM`, `READONLY`, `BUSY`, `LOADING`, `MASTERDOWN`) is retried, for the leases
//!   of the failed batch only, every `min(ttl/10, 100 ms)` until the lease's deadline, and
//!   logged once when a lease starts failing and once when it recovers; a lease whose deadline
//!   passes without a renewal is marked lost (at the deadline, also while its batch is still
//!   waiting) and never renewed again.
//! - A renewal and an [`extend`](crate::guard::LockGuard::extend) of the same lease never overlap:
//!   each holds the lease's write lock while its command is in flight (a renewal from the
//!   moment its batch is planned until its reply is recorded), and a lease whose extend is in
//!   flight waits for the next round. The deadline a reply records is computed from the TTL
//!   that reply's own command set.
//! - The scheduler is a tokio task spawned, when the first lease is registered, on the caller's
//!   runtime (the manager's when the caller has none); it ends when no lease is registered.
//!   Batches are tasks spawned from it, on the same runtime. Several runtimes may share one
//!   manager (`cargo test`'s parallel `#[tokio::test]`s on the default manager): when the
//!   scheduler's runtime shuts down while leases are still registered, the scheduler restarts
//!   at once on lockcore's background runtime (a thread of its own, started then) and renews
//!   them from there. A body that blocks that runtime (for example `std::thread::sleep` on a
//!   current-thread runtime) starves the scheduler: the lease then expires, and the guard
//!   reports it lost once the deadline passes. It is never reported as held past its deadline.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::Instrument;

use crate::backend::Backend;
use crate::backend::renew::RenewItem;
use crate::error::LockError;
use crate::lease::state::{Lease, LeaseStatus, WriteLock};
use crate::lease::telemetry;
use crate::util::background;
use crate::util::defer::OnDrop;
use crate::util::escape::Escaped;

/// The most keys renewed by one script call.
pub(crate) const MAX_BATCH: usize = 512;

/// Per-manager renewal scheduler.
#[derive(Debug, Default)]
pub(crate) struct Watchdog {
    registry: Mutex<Registry>,
    wake: Notify,
}

#[derive(Debug, Default)]
struct Registry {
    entries: HashMap<u64, Entry>,
    next_id: u64,
    running: bool,
    /// Counts scheduler starts, so that a stale scheduler's exit never clears a newer one's
    /// `running`.
    generation: u64,
}

#[derive(Debug)]
struct Entry {
    lease: Arc<Lease>,
    /// After a failed renewal: when to try again (otherwise the lease's own renewal time).
    retry_at: Option<Instant>,
    /// The last renewal of this lease failed (a warning was logged for it).
    failing: bool,
    /// Stop renewing (and report the lease lost) after this instant, from `max_hold`.
    hold_until: Option<Instant>,
    /// In a batch that is being sent (its task holds the lease's write lock).
    in_flight: bool,
}

/// A registration; unregisters on drop.
#[derive(Debug)]
pub(crate) struct Registration {
    watchdog: Weak<Watchdog>,
    id: u64,
}

impl Registration {
    /// The lease's TTL changed (an extend): plan the next renewal from it.
    pub(crate) fn reschedule(&self) {
        if let Some(watchdog) = self.watchdog.upgrade() {
            watchdog.wake.notify_one();
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(watchdog) = self.watchdog.upgrade() {
            watchdog.lock().entries.remove(&self.id);
        }
    }
}

fn retry_interval(ttl: Duration) -> Duration {
    (ttl / 10).clamp(Duration::from_millis(1), Duration::from_millis(100))
}

impl Watchdog {
    fn lock(&self) -> MutexGuard<'_, Registry> {
        // Registry updates never panic half-way; a poisoned lock still holds a valid map.
        self.registry.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The number of leases being renewed: registered and still held (a lease released by
    /// the manager's close, or lost, leaves the registry only at the scheduler's next plan).
    pub(crate) fn live(&self) -> usize {
        self.lock()
            .entries
            .values()
            .filter(|entry| entry.lease.is_held())
            .count()
    }

    /// Starts renewing `lease` until the returned registration is dropped.
    pub(crate) fn register(
        self: &Arc<Self>,
        lease: Arc<Lease>,
        max_hold: Option<Duration>,
        backend: &Backend,
    ) -> Registration {
        let hold_until = max_hold.and_then(|d| lease.acquired_at.checked_add(d));
        let (id, start) = {
            let mut registry = self.lock();
            let id = registry.next_id;
            registry.next_id = registry.next_id.wrapping_add(1);
            registry.entries.insert(
                id,
                Entry {
                    lease,
                    retry_at: None,
                    failing: false,
                    hold_until,
                    in_flight: false,
                },
            );
            let start = (!registry.running).then(|| {
                registry.running = true;
                registry.generation = registry.generation.wrapping_add(1);
                registry.generation
            });
            (id, start)
        };
        if let Some(generation) = start {
            start_scheduler(Arc::clone(self), backend.clone(), generation, false);
        } else {
            self.wake.notify_one();
        }
        Registration {
            watchdog: Arc::downgrade(self),
            id,
        }
    }

    /// Settles what is over and picks the batch due now; or the instant to wake up at, or
    /// `None` when nothing is registered (the scheduler then stops).
    fn plan(&self, now: Instant) -> Option<Plan> {
        let mut registry = self.lock();
        registry.entries.retain(|_, entry| {
            let lease = &entry.lease;
            if lease.status() != LeaseStatus::Held {
                return false;
            }
            if now >= lease.deadline() {
                telemetry::lost(
                    lease,
                    "expired",
                    "watchdog could not renew the lease before its deadline; lock lost",
                );
                lease.settle(LeaseStatus::Lost);
                return false;
            }
            if entry.hold_until.is_some_and(|until| now >= until) {
                telemetry::lost(
                    lease,
                    "max_hold",
                    "lock held for its whole max_hold; watchdog stops renewing and reports it lost",
                );
                lease.settle(LeaseStatus::Lost);
                return false;
            }
            true
        });
        if registry.entries.is_empty() {
            registry.running = false;
            return None;
        }
        let mut batch = Vec::new();
        let mut wake_at: Option<Instant> = None;
        let mut wake_by = |at: Instant| wake_at = Some(wake_at.map_or(at, |w| w.min(at)));
        for (id, entry) in &mut registry.entries {
            let lease = Arc::clone(&entry.lease);
            let ttl = lease.ttl();
            // Loss at the deadline (or at the end of max_hold) is settled here, also while a
            // batch still waits for its reply.
            let end = entry
                .hold_until
                .map_or(lease.deadline(), |until| until.min(lease.deadline()));
            if entry.in_flight {
                // Its batch wakes the scheduler once its reply is recorded.
                wake_by(end);
                continue;
            }
            // A retry is due at its own time; regular renewals due within the next ttl/6 join
            // this round.
            let (due, ready) = match entry.retry_at {
                Some(at) => (at, at <= now),
                None => {
                    let due = lease.renewal_due();
                    (due, due <= now + ttl / 6)
                }
            };
            if !ready {
                wake_by(due.min(end));
                continue;
            }
            match lease.try_write_lock() {
                // The TTL is read under the write lock: an extend that finished just before
                // must not be undone by a renewal with the old TTL.
                Some(write) => {
                    entry.in_flight = true;
                    wake_by(end);
                    batch.push(Renewal {
                        id: *id,
                        ttl: lease.ttl(),
                        lease,
                        write,
                    });
                }
                // An extend is in flight; it wakes the scheduler when done. Look again soon in
                // case its future was dropped.
                None => wake_by(now + retry_interval(ttl)),
            }
        }
        Some(Plan { batch, wake_at })
    }

    /// Records the results of a batch sent at `start`.
    fn settle_batch(&self, start: Instant, batch: &[Renewal], reply: Result<Vec<bool>, LockError>) {
        let mut registry = self.lock();
        let renewed = match reply {
            Ok(renewed) => renewed,
            Err(err) => {
                let leases: Vec<&Lease> = batch.iter().map(|renewal| &*renewal.lease).collect();
                telemetry::renewal_failed(&leases, &err);
                for renewal in batch {
                    if let Some(entry) = registry.entries.get_mut(&renewal.id) {
                        entry.retry_later(renewal, &err);
                    }
                }
                return;
            }
        };
        for (renewal, ok) in batch.iter().zip(renewed) {
            let lease = &renewal.lease;
            // A lease released (unregistered) while the batch was in flight is not ours to
            // judge: its release may have deleted the key first.
            let Some(entry) = registry.entries.get_mut(&renewal.id) else {
                continue;
            };
            if lease.status() != LeaseStatus::Held {
                continue;
            }
            match ok {
                true if Instant::now() < lease.deadline() => {
                    lease.renewed(&renewal.write, start, renewal.ttl);
                    telemetry::renewed(lease);
                    entry.retry_at = None;
                    if std::mem::take(&mut entry.failing) {
                        tracing::info!(key = %Escaped(&lease.key), "watchdog renewal works again");
                    }
                }
                renewed => {
                    if renewed {
                        // Renewed, but only after the lease's validity ran out (Redlock: the
                        // quorum may not have been intact all along). Not ours any more.
                        telemetry::lost(
                            lease,
                            "late_renewal",
                            "watchdog renewal completed after the lease's deadline; lock lost",
                        );
                    } else {
                        telemetry::lost(
                            lease,
                            "taken",
                            "watchdog found the key expired, of another type or held by another token; lock lost",
                        );
                    }
                    lease.settle(LeaseStatus::Lost);
                    registry.entries.remove(&renewal.id);
                }
            }
        }
    }

    /// Leaves out of `batch` the leases released or lost since it was planned, so that a
    /// batch sent after its guard is gone does not renew it.
    fn still_renewing(&self, batch: &mut Vec<Renewal>) {
        let registry = self.lock();
        batch.retain(|renewal| {
            registry.entries.contains_key(&renewal.id)
                && renewal.lease.status() == LeaseStatus::Held
        });
    }
}

impl Entry {
    /// A renewal of this lease failed: try again at the documented pace, and log only when the
    /// lease starts failing.
    fn retry_later(&mut self, renewal: &Renewal, error: &dyn std::fmt::Display) {
        self.retry_at = Some(Instant::now() + retry_interval(renewal.ttl));
        if !std::mem::replace(&mut self.failing, true) {
            tracing::warn!(key = %Escaped(&renewal.lease.key), error = %error, "watchdog renewal failed; retrying every min(ttl/10, 100 ms) until the lease's deadline");
        } else {
            tracing::debug!(key = %Escaped(&renewal.lease.key), error = %error, "watchdog renewal failed again");
        }
    }
}

/// One lease in a renewal batch, with the right to set its TTL until the batch is settled.
struct Renewal {
    id: u64,
    lease: Arc<Lease>,
    /// The TTL this renewal sends.
    ttl: Duration,
    write: WriteLock,
}

struct Plan {
    batch: Vec<Renewal>,
    wake_at: Option<Instant>,
}

/// A batch being sent by its own task. Dropping it, after its reply is recorded or unsent (a
/// runtime that shut down), frees its leases for the next round and wakes the scheduler.
struct InFlight {
    dog: Arc<Watchdog>,
    batch: Vec<Renewal>,
}

impl InFlight {
    /// Sends the batch, waiting at most until the latest deadline of its leases, and records
    /// the reply.
    async fn send(mut self, backend: Backend) {
        self.dog.still_renewing(&mut self.batch);
        let start = Instant::now();
        let Some(give_up_at) = self.batch.iter().map(|r| r.lease.deadline()).max() else {
            return;
        };
        let leases: Vec<RenewItem<'_>> = self
            .batch
            .iter()
            .map(|renewal| {
                let lease = &renewal.lease;
                (lease.key.as_str(), lease.value.renew_arg(), renewal.ttl)
            })
            .collect();
        let call = backend
            .renew(&leases)
            .instrument(telemetry::renew_span(leases.len()));
        let reply = tokio::time::timeout_at(give_up_at, call)
            .await
            .unwrap_or_else(|_| Err(no_reply_in_time()));
        self.dog.settle_batch(start, &self.batch, reply);
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let ids: Vec<u64> = self.batch.iter().map(|renewal| renewal.id).collect();
        // The write locks go first, so that the scheduler woken below can take them.
        self.batch.clear();
        {
            let mut registry = self.dog.lock();
            for id in ids {
                if let Some(entry) = registry.entries.get_mut(&id) {
                    entry.in_flight = false;
                }
            }
        }
        self.dog.wake.notify_one();
    }
}

/// The error of a batch whose reply did not come before its leases' deadlines.
fn no_reply_in_time() -> LockError {
    LockError::Redis(redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "no reply to the renewal before the leases' deadlines",
    )))
}

/// `batch` in the groups the backend renews independently (one per cluster slot), each cut
/// into batches of at most [`MAX_BATCH`] keys.
fn batches(backend: &Backend, batch: Vec<Renewal>) -> Vec<Vec<Renewal>> {
    let mut out = Vec::new();
    for mut group in backend.renewal_groups(batch, |renewal| renewal.lease.key.as_str()) {
        while group.len() > MAX_BATCH {
            let rest = group.split_off(MAX_BATCH);
            out.push(std::mem::replace(&mut group, rest));
        }
        if !group.is_empty() {
            out.push(group);
        }
    }
    out
}

/// Spawns the scheduler of `generation`: on the caller's runtime (or the manager's), or on
/// lockcore's background runtime when `background` is set.
///
/// Its task carries a drop guard. When the task ends, the guard marks the scheduler stopped,
/// so that the next registration starts a new one. When a runtime that shut down drops it
/// while leases are still registered (leases of other runtimes that use the same manager), the
/// guard restarts it at once on the background runtime, which outlives every caller's. A stale
/// scheduler's exit never clears a newer one's `running`.
fn start_scheduler(dog: Arc<Watchdog>, backend: Backend, generation: u64, on_background: bool) {
    let running = {
        let dog = Arc::clone(&dog);
        let backend = backend.clone();
        OnDrop::new(move || {
            let mut registry = dog.lock();
            if registry.generation != generation || !registry.running {
                return;
            }
            if registry.entries.is_empty() || background::handle().is_none() {
                registry.running = false;
                return;
            }
            registry.generation = registry.generation.wrapping_add(1);
            let next = registry.generation;
            drop(registry);
            tracing::debug!(
                "the watchdog's runtime shut down; it goes on on lockcore's background runtime"
            );
            start_scheduler(Arc::clone(&dog), backend, next, true);
        })
    };
    let task = run(running, Arc::clone(&dog), backend.clone());
    // Batches are spawned from the scheduler's task, so they run where it runs.
    match on_background.then(background::handle).flatten() {
        Some(handle) => drop(handle.spawn(task)),
        None => backend.spawn(task),
    }
}

/// The scheduler loop. It never waits on the network: every batch is sent by a task of its own.
/// Ends when nothing is registered (every registered lease keeps its manager, and so this
/// watchdog, alive).
async fn run(_running: OnDrop<impl FnOnce()>, dog: Arc<Watchdog>, backend: Backend) {
    loop {
        let Some(plan) = dog.plan(Instant::now()) else {
            return;
        };
        for batch in batches(&backend, plan.batch) {
            let in_flight = InFlight {
                dog: Arc::clone(&dog),
                batch,
            };
            backend.spawn(in_flight.send(backend.clone()));
        }
        let wake_at = plan.wake_at.unwrap_or_else(Instant::now);
        let woken = dog.wake.notified();
        tokio::select! {
            () = woken => {}
            () = tokio::time::sleep_until(wake_at) => {}
        }
    }
}
