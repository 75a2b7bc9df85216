//! The state of one held lease, shared by its [`LockGuard`](crate::guard::LockGuard) and the
//! manager's watchdog.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::protocol::value::LockValue;
use crate::util::time::validity;

/// Where a lease stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaseStatus {
    Held,
    /// The key expired, was deleted, holds another token, or could not be renewed in time.
    Lost,
    /// Released (or handed to a background release) by its guard.
    Released,
    /// Released by [`LockManager::close`](crate::manager::LockManager::close) on its guard's behalf.
    Closed,
}

#[derive(Debug, Clone, Copy)]
struct Times {
    ttl: Duration,
    /// Start of the acquire, extend or renewal that set the current TTL.
    renewed_at: Instant,
    deadline: Instant,
    /// Handed over with a claim window shorter than `ttl`, and not renewed since: the first
    /// renewal is due a third of the way to `deadline` and sets `ttl`.
    provisional: bool,
}

/// One held lease.
#[derive(Debug)]
pub(crate) struct Lease {
    pub(crate) key: String,
    /// The value the key holds: token and holder metadata.
    pub(crate) value: LockValue,
    pub(crate) fencing_token: u64,
    /// When the successful acquire attempt started (the validity is counted from here).
    pub(crate) acquired_at: Instant,
    /// When the lease was handed to its guard: the holder's own time starts here (a waiter's
    /// wait before a hand-over is not held time).
    pub(crate) held_since: Instant,
    /// The `#[distributed_lock]` key template, for telemetry labels.
    pub(crate) key_template: Option<&'static str>,
    /// The minimum hold a release keeps the key for, counted from the acquire by the server's
    /// clock ([`LockOptions::hold_at_least`](crate::options::LockOptions::hold_at_least)).
    pub(crate) hold_at_least: Option<Duration>,
    times: Mutex<Times>,
    status: watch::Sender<LeaseStatus>,
    /// Held by whoever has a TTL-setting command (an extend or a renewal) in flight, so that
    /// two of them never race: Redis applies them in the order the guard records them.
    writes: Arc<tokio::sync::Mutex<()>>,
}

/// The right to send a TTL-setting command for one lease; see [`Lease::write_lock`].
pub(crate) type WriteLock = tokio::sync::OwnedMutexGuard<()>;

impl Lease {
    /// A lease won by an attempt that started at `attempt_start`.
    pub(crate) fn new(
        key: String,
        value: LockValue,
        fencing_token: u64,
        ttl: Duration,
        attempt_start: Instant,
    ) -> Self {
        Lease {
            key,
            value,
            fencing_token,
            acquired_at: attempt_start,
            held_since: Instant::now(),
            key_template: None,
            hold_at_least: None,
            times: Mutex::new(Times {
                ttl,
                renewed_at: attempt_start,
                deadline: attempt_start + validity(ttl),
                provisional: false,
            }),
            status: watch::Sender::new(LeaseStatus::Held),
            writes: Arc::default(),
        }
    }

    /// A lease handed over by a release with a TTL of `claim` (at most `ttl`), after the queued
    /// attempt that started at `queued_at`: valid until `queued_at` + `claim` − drift
    /// allowance, and renewed with `ttl` from its first renewal on.
    pub(crate) fn handed_over(
        key: String,
        value: LockValue,
        fencing_token: u64,
        ttl: Duration,
        claim: Duration,
        queued_at: Instant,
    ) -> Self {
        let lease = Lease::new(key, value, fencing_token, ttl, queued_at);
        {
            let mut times = lease.times.lock().unwrap_or_else(PoisonError::into_inner);
            times.deadline = queued_at + validity(claim);
            times.provisional = claim < ttl;
        }
        lease
    }

    /// Whether the lease still runs on a hand-over's claim window (see
    /// [`handed_over`](Self::handed_over)).
    pub(crate) fn is_provisional(&self) -> bool {
        self.times().provisional
    }

    /// Waits for the TTL-setting command in flight, if any, and returns the right to send the
    /// next one. Extend and renewal both take it, so the TTL the lease records is always the
    /// one Redis applied last.
    pub(crate) async fn write_lock(&self) -> WriteLock {
        Arc::clone(&self.writes).lock_owned().await
    }

    /// [`write_lock`](Self::write_lock) without waiting: `None` while an extend is in flight.
    pub(crate) fn try_write_lock(&self) -> Option<WriteLock> {
        Arc::clone(&self.writes).try_lock_owned().ok()
    }

    /// The lease of a key rendered from `template` (the attribute's).
    pub(crate) fn with_key_template(mut self, template: Option<&'static str>) -> Self {
        self.key_template = template;
        self
    }

    /// The lease of options with a minimum hold.
    pub(crate) fn with_hold_at_least(mut self, hold: Option<Duration>) -> Self {
        self.hold_at_least = hold;
        self
    }

    fn times(&self) -> Times {
        // The lock is held only to copy two fields; a poisoned lock still holds valid data.
        *self.times.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn ttl(&self) -> Duration {
        self.times().ttl
    }

    pub(crate) fn deadline(&self) -> Instant {
        self.times().deadline
    }

    /// When the next renewal is due: a third of the TTL after the latest renewal (a third of
    /// the way to the deadline while [provisional](Self::is_provisional)).
    pub(crate) fn renewal_due(&self) -> Instant {
        let times = self.times();
        if times.provisional {
            times.renewed_at + times.deadline.saturating_duration_since(times.renewed_at) / 3
        } else {
            times.renewed_at + times.ttl / 3
        }
    }

    /// Time left until the deadline; zero once the lease is not held.
    pub(crate) fn remaining(&self) -> Duration {
        if self.status() == LeaseStatus::Held {
            self.deadline().saturating_duration_since(Instant::now())
        } else {
            Duration::ZERO
        }
    }

    pub(crate) fn status(&self) -> LeaseStatus {
        *self.status.borrow()
    }

    /// A renewal or extend that started at `start` set the TTL to `ttl`: the TTL its own
    /// command sent. The caller holds the [`WriteLock`] it sent that command under.
    pub(crate) fn renewed(&self, _sent_under: &WriteLock, start: Instant, ttl: Duration) {
        let mut times = self.times.lock().unwrap_or_else(PoisonError::into_inner);
        times.ttl = ttl;
        times.renewed_at = start;
        times.deadline = start + validity(ttl);
        times.provisional = false;
    }

    /// Moves from `Held` to `to`; returns whether this call made the move.
    pub(crate) fn settle(&self, to: LeaseStatus) -> bool {
        self.status.send_if_modified(|status| {
            if *status == LeaseStatus::Held {
                *status = to;
                true
            } else {
                false
            }
        })
    }

    /// Held, and the deadline has not passed.
    pub(crate) fn is_held(&self) -> bool {
        self.status() == LeaseStatus::Held && Instant::now() < self.deadline()
    }

    /// Completes when the lease is lost: when loss is detected (by the watchdog, an extend or a
    /// release), or when the deadline passes without a renewal.
    pub(crate) async fn lost(&self) {
        let mut status = self.status.subscribe();
        loop {
            // Copy the status out: the `watch::Ref` must not live across an `.await`.
            let current = *status.borrow_and_update();
            match current {
                // Closed: the manager released the key; another holder may take it.
                LeaseStatus::Lost | LeaseStatus::Closed => return,
                // Released through a consumed guard; `lost` can no longer be polled then, but
                // a background release ends the lease as well.
                LeaseStatus::Released => return std::future::pending().await,
                LeaseStatus::Held => {}
            }
            let deadline = self.deadline();
            if Instant::now() >= deadline {
                self.settle(LeaseStatus::Lost);
                return;
            }
            tokio::select! {
                changed = status.changed() => {
                    if changed.is_err() {
                        return std::future::pending().await;
                    }
                }
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_handed_over_lease_runs_on_its_claim_window_until_renewed() {
        let queued_at = Instant::now();
        let (ttl, claim) = (Duration::from_secs(10), Duration::from_millis(500));
        let lease = Lease::handed_over(
            "k".into(),
            LockValue::stored("t".into()),
            7,
            ttl,
            claim,
            queued_at,
        );
        assert!(lease.is_provisional());
        assert_eq!(lease.deadline(), queued_at + validity(claim));
        assert_eq!(lease.ttl(), ttl, "renewals set the full ttl");
        assert_eq!(lease.renewal_due(), queued_at + validity(claim) / 3);
        let write = lease.write_lock().await;
        let renewed_at = queued_at + Duration::from_millis(100);
        lease.renewed(&write, renewed_at, ttl);
        assert!(!lease.is_provisional());
        assert_eq!(lease.deadline(), renewed_at + validity(ttl));
        assert_eq!(lease.renewal_due(), renewed_at + ttl / 3);
        // A ttl within the claim window is the full lease already.
        let short = Lease::handed_over(
            "k".into(),
            LockValue::stored("t".into()),
            7,
            claim,
            claim,
            queued_at,
        );
        assert!(!short.is_provisional());
    }

    #[tokio::test(start_paused = true)]
    async fn lost_completes_at_the_deadline_and_follows_renewals() {
        let start = Instant::now();
        let lease = Lease::new(
            "k".into(),
            LockValue::stored("t".into()),
            1,
            Duration::from_secs(1),
            start,
        );
        let write = lease.write_lock().await;
        lease.renewed(
            &write,
            start + Duration::from_millis(500),
            Duration::from_secs(1),
        );
        lease.lost().await;
        assert!(
            Instant::now() >= start + Duration::from_millis(500) + validity(Duration::from_secs(1))
        );
        assert_eq!(lease.status(), LeaseStatus::Lost);
    }
}

/// Validity arithmetic, fuzzed (proptest, with shrinking): it saturates and never panics.
#[cfg(test)]
mod proptests {
    use proptest::prelude::*;

    use super::*;
    use crate::options::LockOptions;

    fn valid_ttl() -> impl Strategy<Value = Duration> {
        let max_ms = u64::try_from(LockOptions::MAX_TTL.as_millis()).unwrap_or(u64::MAX);
        (1..=max_ms).prop_map(Duration::from_millis)
    }

    proptest! {
        #[test]
        fn a_lease_ends_within_its_ttl(ttl in valid_ttl(), later in valid_ttl()) {
            let start = Instant::now();
            let lease = Lease::new("k".into(), LockValue::stored("t".into()), 1, ttl, start);
            prop_assert!(lease.deadline() <= start + ttl);
            prop_assert!(lease.remaining() <= ttl);
            let write = lease.try_write_lock();
            prop_assert!(write.is_some(), "nothing else holds the write lock");
            if let Some(write) = write {
                lease.renewed(&write, start, later);
            }
            prop_assert!(lease.deadline() <= start + later);
            prop_assert_eq!(lease.ttl(), later);
        }
    }
}
