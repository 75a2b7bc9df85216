//! The first renewal of a handed-over lease whose guard has no watchdog: it sets the full TTL
//! a third of the way into the claim window (see `handoff`), unless the guard has been released
//! or extended by then.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::Backend;
use crate::lease::state::{Lease, LeaseStatus};
use crate::util::escape::Escaped;

/// How many times a promotion that Redis did not answer is tried again.
const RETRIES: usize = 3;

/// A spawned promotion; dropping it cancels the promotion. The guard drops it before its
/// release is sent, so that a renewal that lands after the release (and finds the key handed
/// on) is never read as a loss, as the watchdog ignores leases unregistered meanwhile.
#[derive(Debug)]
pub(crate) struct Promotion {
    cancelled: Arc<AtomicBool>,
}

impl Drop for Promotion {
    fn drop(&mut self) {
        self.cancelled.store(true, Ordering::SeqCst);
    }
}

/// Spawns the promotion of `lease` (by the crate's one spawn policy).
pub(crate) fn spawn(backend: &Backend, lease: Arc<Lease>) -> Promotion {
    let cancelled = Arc::new(AtomicBool::new(false));
    let renewing = backend.clone();
    let flag = Arc::clone(&cancelled);
    backend.spawn(async move { promote(&renewing, &lease, &flag).await });
    Promotion { cancelled }
}

async fn promote(backend: &Backend, lease: &Lease, cancelled: &AtomicBool) {
    tokio::select! {
        () = tokio::time::sleep_until(lease.renewal_due()) => {}
        () = lease.lost() => return,
    }
    // Serialised with the guard's extends, as the watchdog's renewals are.
    let write = lease.write_lock().await;
    let ttl = lease.ttl();
    for _ in 0..=RETRIES {
        if cancelled.load(Ordering::SeqCst)
            || lease.status() != LeaseStatus::Held
            || !lease.is_provisional()
        {
            return;
        }
        let start = Instant::now();
        if start >= lease.deadline() {
            lease.settle(LeaseStatus::Lost);
            return;
        }
        let renewed = backend
            .renew(&[(&lease.key, lease.value.renew_arg(), ttl)])
            .await;
        if cancelled.load(Ordering::SeqCst) {
            return;
        }
        match renewed {
            Ok(renewed) => match renewed.first() {
                Some(true) => return lease.renewed(&write, start, ttl),
                Some(false) => {
                    lease.settle(LeaseStatus::Lost);
                    return;
                }
                None => {}
            },
            Err(err) => {
                tracing::debug!(key = %Escaped(&lease.key), error = %err, "renewal of a handed-over lease failed; retrying");
            }
        }
        let pause = lease.remaining().min(Duration::from_millis(20));
        tokio::time::sleep(pause).await;
    }
    tracing::warn!(key = %Escaped(&lease.key), "could not renew a handed-over lease; it ends with its claim window");
}
