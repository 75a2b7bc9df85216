//! The background clean-up of lock values that may be left on a node: a failed or dropped
//! acquire's, a dropped guard's, a release that could not be sent; the count of those and of
//! the acquire calls in flight, which the manager's close waits for; and the switch that
//! closes the backend.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::future::join_all;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::backend::single::{BulkKey, Single};
use crate::backend::{Backend, Hold, Kind};
use crate::error::LockError;
use crate::protocol::value::LockValue;
use crate::util::defer::OnDrop;
use crate::util::escape::Escaped;

impl Backend {
    /// Compare-and-delete of every token of `keys` at once; a release that fails is retried in
    /// the background.
    pub(super) async fn release_all_tokens(
        &self,
        single: &Single,
        keys: &[BulkKey<'_>],
        ttl: Duration,
    ) {
        let releases = keys.iter().map(|bulk| async move {
            if let Err(cleanup) = single.release(bulk.key, bulk.value, None, None).await {
                tracing::warn!(key = %Escaped(bulk.key), error = %cleanup, "could not clean up after a failed acquire; retrying in the background");
                self.spawn_release(bulk.key.to_owned(), bulk.value.clone(), ttl);
            }
        });
        join_all(releases).await;
    }

    /// Spawns a bounded background compare-and-delete of `token` on `key`. If no runtime runs
    /// it, the key is left to its TTL, and that is logged.
    pub(crate) fn spawn_release(&self, key: String, value: LockValue, ttl: Duration) {
        self.spawn_release_held(key, value, ttl, None);
    }

    /// [`spawn_release`](Self::spawn_release) of a held lease, which keeps its key for what is
    /// left of the minimum `hold` (see [`Backend::release`]).
    pub(crate) fn spawn_release_held(
        &self,
        key: String,
        value: LockValue,
        ttl: Duration,
        hold: Option<Duration>,
    ) {
        let backend = self.clone();
        let left_to_ttl = {
            let key = key.clone();
            OnDrop::new(move || {
                tracing::warn!(
                    key = %Escaped(&key),
                    "no runtime could run the release; the key expires with its TTL"
                );
            })
        };
        self.spawn_tracked(async move {
            backend.release_with_retries(&key, &value, ttl, hold).await;
            left_to_ttl.disarm();
        });
    }

    /// Spawns `task` (by the crate's one policy) as a release in flight: counted until it ends
    /// or its runtime drops it, so that [`releases_settled`](Self::releases_settled) waits
    /// for it.
    pub(crate) fn spawn_tracked<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let tracked = self.in_flight.track();
        self.spawn(async move {
            task.await;
            drop(tracked);
        });
    }

    /// Starts an acquire call: counted among the calls in flight until the returned value is
    /// dropped, which the call does once its lock is handed to the caller or given back (the
    /// give-back spawned, itself in flight), so that a close that returns leaves no acquire
    /// behind that may still take a key.
    ///
    /// # Errors
    /// [`LockError::Closed`] once [`close`](Backend::close) was called. (The count goes up
    /// before the check, and close sets the flag before it waits: a call either sees the
    /// manager closed or is waited for.)
    pub(crate) fn start_call(&self) -> Result<InFlightCall, LockError> {
        let call = InFlightCall {
            _tracked: self.calls.track(),
        };
        self.ensure_open()?;
        Ok(call)
    }

    /// Completes once [`close`](Backend::close) was called: a waiting acquire stops waiting at
    /// once. Cancel-safe.
    pub(crate) async fn closing(&self) {
        self.closed.wait().await;
    }

    /// Completes once no acquire call ([`start_call`](Self::start_call)) is in flight, or
    /// after [`CALLS_WAIT_CAP`]: `false` then (logged). Each call ends soon once the backend is
    /// closed: an attempt within the response timeout (Redlock: the node timeout), a waiting
    /// call at once (it wakes and withdraws); the cap only bounds the wait for a call whose
    /// future is kept but no longer polled. Its give-back or withdrawal is a release in flight
    /// by the time it ends. Cancel-safe.
    pub(crate) async fn calls_settled(&self) -> bool {
        let settled = tokio::time::timeout(CALLS_WAIT_CAP, self.calls.settled())
            .await
            .is_ok();
        if !settled {
            tracing::warn!(
                "an acquire call of the closed manager did not end within {CALLS_WAIT_CAP:?} (its future is kept but not polled?); close does not wait for it"
            );
        }
        settled
    }

    /// Completes once no release spawned by this backend is in flight. Each is bounded: it
    /// gives up once its TTL has passed (see `release_with_retries`). Cancel-safe.
    pub(crate) async fn releases_settled(&self) {
        self.in_flight.settled().await;
    }

    /// Compare-and-delete with retries, for background use. Redlock: every node is retried
    /// until it has answered (a late or unreachable node may still hold the token). Gives up
    /// once `ttl` has passed (the key has expired by then) or after 16 attempts, whichever
    /// comes first.
    async fn release_with_retries(
        &self,
        key: &str,
        value: &LockValue,
        ttl: Duration,
        hold: Option<Duration>,
    ) {
        let give_up_at = Instant::now() + ttl;
        let mut delay = Duration::from_millis(10);
        let mut pending: Vec<usize> = match &self.kind {
            Kind::Single(_) => Vec::new(),
            Kind::Redlock(redlock) => (0..redlock.len()).collect(),
        };
        for _ in 0..16 {
            match &self.kind {
                Kind::Single(single) => {
                    match single.release(key, value, None, Hold::of(hold, ttl)).await {
                        Ok(_) => return,
                        Err(err) => {
                            tracing::debug!(key = %Escaped(key), error = %err, "background release failed; retrying");
                        }
                    }
                }
                Kind::Redlock(redlock) => {
                    pending = redlock
                        .release_on(key, value.as_str(), &pending, give_up_at, hold)
                        .await;
                    if pending.is_empty() {
                        return;
                    }
                    tracing::debug!(
                        key = %Escaped(key),
                        nodes = pending.len(),
                        "background release not answered by every node; retrying them"
                    );
                }
            }
            if Instant::now() + delay >= give_up_at {
                break;
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(1));
        }
        tracing::warn!(
            key = %Escaped(key),
            "background release gave up; the key expires with its TTL"
        );
    }
}

/// How long a close waits at most for the acquire calls in flight to end (see
/// [`Backend::calls_settled`]).
pub(crate) const CALLS_WAIT_CAP: Duration = Duration::from_secs(10);

/// Whether a backend is closed, and the wake-up of the calls that wait while it closes.
#[derive(Debug, Default)]
pub(crate) struct Closed {
    flag: AtomicBool,
    signal: Notify,
}

impl Closed {
    /// Whether [`set`](Self::set) was called.
    pub(crate) fn is_set(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }

    /// Closes, and wakes every [`wait`](Self::wait).
    pub(crate) fn set(&self) {
        self.flag.store(true, Ordering::Release);
        self.signal.notify_waiters();
    }

    /// Completes once [`set`](Self::set) was called.
    async fn wait(&self) {
        let notified = self.signal.notified();
        tokio::pin!(notified);
        // Registered before the check: a `set` after it wakes this wait.
        notified.as_mut().enable();
        if self.is_set() {
            return;
        }
        notified.await;
    }
}

/// An acquire call in flight (see [`Backend::start_call`]); dropping it ends it.
pub(crate) struct InFlightCall {
    _tracked: Tracked,
}

impl std::fmt::Debug for InFlightCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InFlightCall")
    }
}

/// The releases and acquire calls of one backend that are in flight (started and not ended):
/// a counter, and a wake-up sent only once somebody waits for it to reach zero, so that an
/// uncontended acquire + release pays two atomic updates for it and nothing more.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    count: AtomicUsize,
    /// Set for good by the first [`settled`](Self::settled) (only a close waits).
    watched: AtomicBool,
    zero: Notify,
}

/// One release in flight; dropping it (the task ended or was dropped unrun) ends it.
struct Tracked(Arc<InFlight>);

impl Drop for Tracked {
    fn drop(&mut self) {
        // SeqCst here and in `settled`: either the waiter sees the count at zero, or this drop
        // sees the waiter and wakes it.
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 && self.0.watched.load(Ordering::SeqCst)
        {
            self.0.zero.notify_waiters();
        }
    }
}

impl InFlight {
    fn track(self: &Arc<Self>) -> Tracked {
        self.count.fetch_add(1, Ordering::SeqCst);
        Tracked(Arc::clone(self))
    }

    async fn settled(&self) {
        loop {
            let notified = self.zero.notified();
            tokio::pin!(notified);
            // Registered before the check: a drop to zero after it wakes this wait.
            notified.as_mut().enable();
            self.watched.store(true, Ordering::SeqCst);
            if self.count.load(Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn settled_waits_for_every_tracked_release_and_for_dropped_ones() {
        let in_flight = Arc::new(InFlight::default());
        in_flight.settled().await;
        let (first, second) = (in_flight.track(), in_flight.track());
        let waiting = {
            let in_flight = Arc::clone(&in_flight);
            tokio::spawn(async move { in_flight.settled().await })
        };
        tokio::task::yield_now().await;
        drop(first);
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "one release is still in flight");
        drop(second);
        tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .unwrap_or_else(|_| panic!("settled once none is in flight"))
            .unwrap_or_else(|e| panic!("{e}"));
    }
}
