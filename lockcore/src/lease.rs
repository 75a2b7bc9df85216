//! The state of one held lease, shared by its [`LockGuard`](crate::LockGuard) and the
//! manager's watchdog.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

/// Where a lease stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaseStatus {
    Held,
    /// The key expired, was deleted, holds another token, or could not be renewed in time.
    Lost,
    /// Released (or handed to a background release) by its guard.
    Released,
}

/// Validity as in the Redlock spec: `ttl - (ttl * 0.01 + 2 ms)` for clock drift, saturating
/// at zero.
pub(crate) fn validity(ttl: Duration) -> Duration {
    let drift = ttl / 100 + Duration::from_millis(2);
    ttl.saturating_sub(drift)
}

#[derive(Debug, Clone, Copy)]
struct Times {
    ttl: Duration,
    /// Start of the acquire, extend or renewal that set the current TTL.
    renewed_at: Instant,
    deadline: Instant,
}

/// One held lease.
#[derive(Debug)]
pub(crate) struct Lease {
    pub(crate) key: String,
    /// The whole lock value: token and holder metadata (see `holder`).
    pub(crate) token: String,
    pub(crate) fencing_token: u64,
    /// When the successful acquire attempt started.
    pub(crate) acquired_at: Instant,
    /// The `#[distributed_lock]` key template, for telemetry labels.
    pub(crate) key_template: Option<&'static str>,
    times: Mutex<Times>,
    status: watch::Sender<LeaseStatus>,
}

impl Lease {
    /// A lease won by an attempt that started at `attempt_start`.
    pub(crate) fn new(
        key: String,
        token: String,
        fencing_token: u64,
        ttl: Duration,
        attempt_start: Instant,
    ) -> Self {
        Lease {
            key,
            token,
            fencing_token,
            acquired_at: attempt_start,
            key_template: None,
            times: Mutex::new(Times {
                ttl,
                renewed_at: attempt_start,
                deadline: attempt_start + validity(ttl),
            }),
            status: watch::Sender::new(LeaseStatus::Held),
        }
    }

    /// The lease of a key rendered from `template` (the attribute's).
    pub(crate) fn with_key_template(mut self, template: Option<&'static str>) -> Self {
        self.key_template = template;
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

    /// When the watchdog should next renew: a third of the TTL after the latest renewal.
    pub(crate) fn renewal_due(&self) -> Instant {
        let times = self.times();
        times.renewed_at + times.ttl / 3
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

    /// A renewal or extend that started at `start` set the TTL to `ttl`.
    pub(crate) fn renewed(&self, start: Instant, ttl: Duration) {
        let mut times = self.times.lock().unwrap_or_else(PoisonError::into_inner);
        times.ttl = ttl;
        times.renewed_at = start;
        times.deadline = start + validity(ttl);
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
                LeaseStatus::Lost => return,
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

    #[test]
    fn validity_saturates_and_never_exceeds_ttl() {
        assert_eq!(validity(Duration::from_millis(1)), Duration::ZERO);
        assert_eq!(validity(Duration::ZERO), Duration::ZERO);
        assert_eq!(
            validity(Duration::from_secs(10)),
            Duration::from_millis(9_898)
        );
        assert!(validity(Duration::MAX) < Duration::MAX);
    }

    #[tokio::test(start_paused = true)]
    async fn lost_completes_at_the_deadline_and_follows_renewals() {
        let start = Instant::now();
        let lease = Lease::new("k".into(), "t".into(), 1, Duration::from_secs(1), start);
        lease.renewed(start + Duration::from_millis(500), Duration::from_secs(1));
        lease.lost().await;
        assert!(
            Instant::now() >= start + Duration::from_millis(500) + validity(Duration::from_secs(1))
        );
        assert_eq!(lease.status(), LeaseStatus::Lost);
    }
}
