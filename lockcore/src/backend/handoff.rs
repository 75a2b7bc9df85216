//! Hand-off under contention (single node): waiters queue up in Redis, and a release gives the
//! lock straight to the first live waiter and wakes it with one pub/sub message.
//!
//! # Behavior
//! - **Pushed, in one trip.** A waiter that finds the key held puts its value in a per-key
//!   queue (a Redis list) and its *entry* (its liveness deadline by Redis' clock, TTL, claim
//!   window, channel and fencing counter) in the key's entries hash, in the same script call,
//!   after registering for wake-ups: no wake-up can be lost between the check and the wait. The
//!   release script grants the lock to the first live waiter itself: it sets the key to that
//!   waiter's value (its `acquired_at` stamped with the time of the grant) for the waiter's
//!   claim window, mints its fencing token and publishes `<token> <fencing token> <seq> <value>`
//!   on its manager's channel. The woken waiter starts at once, with no claim round trip: from a
//!   release call to the next holder's acquire returning is one trip to Redis and one push.
//!   Its lease's deadline is the claim window, counted from the start of its latest queued
//!   attempt (the grant came later); its first renewal, due a third of the way in, sets the
//!   full TTL (the watchdog's, or a one-off extension), so a body that ends sooner never sends
//!   it.
//! - **Single.** One release wakes one waiter; the others stay parked.
//! - **Fair.** The queue is first come, first served, and a release hands the lock down the
//!   queue instead of freeing it, so the key stays set while anyone live is queued. Only an
//!   expired lease frees it: then the first re-checking waiter hands it to the head of the
//!   queue, and a newcomer's first attempt may take it once, ahead of the queue.
//! - **Robust.** A waiter re-checks at least every [`REFRESH`] (250 ms; jittered down to
//!   125 ms so that waiters that queued together do not re-check together), never later than the
//!   holder's remaining TTL, and never past its wait budget; that re-check also refreshes its
//!   entry. An entry that is not refreshed for its lease ([`ENTRY_LEASE`], 600 ms, plus twice
//!   the waiter's round trip) is skipped, and a lock handed to a waiter that does not start
//!   lapses after its claim window ([`CLAIM_WINDOW`], 500 ms, plus twice the round trip). Both
//!   follow the waiter's round trip to Redis (measured on its manager's calls, at most its
//!   response timeout), so a waiter on a slow link keeps its turn and can use its grant, while
//!   a waiter that died on a fast link holds the others up for about 1 s. A missed wake-up (a
//!   killed pub/sub connection) costs at most one refresh interval: the re-check finds the key
//!   holding its value. A wake-up is used only when it answers the waiter's latest attempt (its
//!   `seq`), so a late one never starts a body on a lease that has lapsed.
//! - **Declared keys.** Every key a queue script touches (the lock key, the fencing counter,
//!   the queue and the entries) is passed in `KEYS` and shares the lock key's cluster slot, so
//!   during a slot migration a script fails before it writes (`TRYAGAIN`) rather than touch a
//!   key on the wrong node. Redis refuses it whenever the node lacks a declared key, even
//!   before any key has moved (the share set of a plain lock, an empty queue): a re-check then
//!   goes again without the share set, so a queued waiter keeps refreshing its entry and its
//!   turn, and what is still refused is waited out within the waiter's budget (see
//!   `migration`).
//! - **Economical.** All waiters of one manager share one pub/sub connection and one channel,
//!   `<prefix>__wake__:<uuid>`, subscribed once when the manager is built (and re-opened in the
//!   background if the connection is lost). The listener runs on the runtime that opened it;
//!   when that runtime shuts down while waiters are registered (waiters of other runtimes that
//!   share the manager), it is re-opened at once on lockcore's background runtime. The queue keys expire on their own when no waiter
//!   refreshes them, so nothing grows with the number of distinct keys.
//!
//! Redlock managers and `LockOptions::handoff(false)` use plain jittered backoff instead.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::runtime::Handle;
use tokio::sync::Notify;

use crate::backend::round_trip::RoundTrip;
use crate::protocol::messages::{Grant, parse_wake_up};
use crate::transport::node::Subscriber;
use crate::util::background;
use crate::util::defer::OnDrop;

/// How long a waiter's entry lives without a re-check, before twice its round trip is added.
pub(crate) const ENTRY_LEASE: Duration = Duration::from_millis(600);
/// The longest a queued waiter sleeps between re-checks (each one refreshes its entry).
pub(crate) const REFRESH: Duration = Duration::from_millis(250);
/// How long a lock handed to a waiter lives until its first renewal sets the full TTL, before
/// twice the waiter's round trip is added.
pub(crate) const CLAIM_WINDOW: Duration = Duration::from_millis(500);
/// The longest the pub/sub connection may take to open and subscribe.
const SUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(1);

/// The claim window and entry lease of a waiter whose round trip to Redis is `rtt`: a grant
/// can reach it up to two round trips and one refresh interval after its attempt started, and
/// its re-checks arrive up to one round trip and one refresh interval apart.
pub(crate) fn windows(rtt: Duration) -> (Duration, Duration) {
    (CLAIM_WINDOW + rtt * 2, ENTRY_LEASE + rtt * 2)
}

/// A queued waiter's next re-check: uniform in [1/2, 1] × [`REFRESH`], so that waiters that
/// queued together do not re-check together.
pub(crate) fn refresh_delay() -> Duration {
    REFRESH.mul_f64(0.5 + 0.5 * fastrand::f64())
}

/// A registered waiter's wake-up: the latest grant delivered, and its signal.
#[derive(Default)]
struct Slot {
    wake: Notify,
    grant: Mutex<Option<Grant>>,
}

/// One manager's wake-up channel and its waiting tokens.
pub(crate) struct Handoff {
    source: Subscriber,
    channel: String,
    /// Registered waiters by token.
    waiters: Mutex<HashMap<String, Arc<Slot>>>,
    listening: AtomicBool,
    /// Counts listener starts, so that a stale listener's exit never clears a newer one's
    /// `listening`.
    generation: AtomicU64,
    opening: AtomicBool,
    starting: tokio::sync::Mutex<()>,
    shutdown: Arc<Notify>,
    /// Closed by the manager: no listener is started again.
    closed: AtomicBool,
    /// Where the listener runs when the caller has no runtime (see `spawn`).
    runtime: Handle,
    /// The round trip of this manager's calls, which sizes its waiters' windows.
    round_trip: RoundTrip,
}

impl Drop for Handoff {
    fn drop(&mut self) {
        self.shutdown.notify_one();
    }
}

impl Handoff {
    /// The wake-ups of one manager; `response_timeout` caps its round-trip estimate.
    pub(crate) fn new(
        source: Subscriber,
        channel: String,
        runtime: Handle,
        response_timeout: Duration,
    ) -> Self {
        Handoff {
            source,
            channel,
            waiters: Mutex::default(),
            listening: AtomicBool::new(false),
            generation: AtomicU64::new(0),
            opening: AtomicBool::new(false),
            starting: tokio::sync::Mutex::new(()),
            shutdown: Arc::new(Notify::new()),
            closed: AtomicBool::new(false),
            runtime,
            round_trip: RoundTrip::new(response_timeout),
        }
    }

    /// Stops the listener for good (the manager is closed): waiters re-check at once and find
    /// the manager closed.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.shutdown.notify_waiters();
        self.shutdown.notify_one();
        for slot in self.waiters().values() {
            slot.wake.notify_one();
        }
    }

    /// A call of this manager to Redis took `sample`.
    pub(crate) fn record_round_trip(&self, sample: Duration) {
        self.round_trip.record(sample);
    }

    /// The claim window and entry lease this manager's waiters ask for now (see [`windows`]).
    pub(crate) fn windows(&self) -> (Duration, Duration) {
        windows(self.round_trip.estimate())
    }

    /// The channel this manager's waiters are woken on.
    pub(crate) fn channel(&self) -> &str {
        &self.channel
    }

    fn waiters(&self) -> MutexGuard<'_, HashMap<String, Arc<Slot>>> {
        // Map updates never panic half-way; a poisoned lock still holds a valid map.
        self.waiters.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers the waiter whose lock value's token is `token` for wake-ups, before its first
    /// queued attempt. Never waits on the network: if the subscription is down, it is re-opened
    /// in the background, and the waiter re-checks every [`REFRESH`] meanwhile. Dropping the
    /// waiter unregisters it; withdrawing its queue entry is the caller's (a release of its
    /// value).
    pub(crate) fn register(self: &Arc<Self>, token: &str) -> Waiter {
        let slot = Arc::new(Slot::default());
        let token = token.to_owned();
        self.waiters().insert(token.clone(), Arc::clone(&slot));
        self.ensure_listener();
        Waiter {
            handoff: Arc::clone(self),
            token,
            slot,
        }
    }

    /// Re-opens the subscription in the background unless it is up or being opened.
    pub(crate) fn ensure_listener(self: &Arc<Self>) {
        self.open_listener(false);
    }

    /// [`ensure_listener`](Self::ensure_listener) on the caller's runtime, or on lockcore's
    /// background runtime when `on_background` is set.
    ///
    /// The opening task carries a drop guard: dropped unfinished (its runtime shut down), it
    /// clears `opening` (or no listener would ever be opened again) and, while waiters are
    /// registered, opens the listener again on the background runtime.
    fn open_listener(self: &Arc<Self>, on_background: bool) {
        if self.closed.load(Ordering::Acquire)
            || self.listening.load(Ordering::Acquire)
            || self.opening.swap(true, Ordering::AcqRel)
        {
            return;
        }
        let unfinished = {
            let handoff = Arc::downgrade(self);
            OnDrop::new(move || {
                if let Some(handoff) = handoff.upgrade() {
                    handoff.opening.store(false, Ordering::Release);
                    handoff.restart_on_background();
                }
            })
        };
        let handoff = Arc::clone(self);
        let task = async move {
            handoff.subscribe().await;
            unfinished.disarm();
            handoff.opening.store(false, Ordering::Release);
        };
        match on_background.then(background::handle).flatten() {
            Some(handle) => drop(handle.spawn(task)),
            None => crate::util::spawn::background(&self.runtime, task),
        }
    }

    /// The listener (or its opening) stopped: while waiters are registered (also waiters of
    /// other runtimes that share this manager), open it again on the background runtime,
    /// which no caller's runtime takes down with it.
    fn restart_on_background(self: &Arc<Self>) {
        if !self.closed.load(Ordering::Acquire)
            && !self.waiters().is_empty()
            && background::handle().is_some()
        {
            self.open_listener(true);
        }
    }

    /// Opens the pub/sub connection, subscribes to the manager's channel and starts the
    /// listener. Bounded by 1 s. Returns whether the listener runs.
    pub(crate) async fn subscribe(self: &Arc<Self>) -> bool {
        let _one_at_a_time = self.starting.lock().await;
        if self.listening.load(Ordering::Acquire) {
            return true;
        }
        let subscribed = tokio::time::timeout(SUBSCRIBE_TIMEOUT, async {
            let mut last_error = None;
            for client in self.source.clients() {
                let attempt = async {
                    let mut pubsub = client.get_async_pubsub().await?;
                    pubsub.subscribe(&self.channel).await?;
                    redis::RedisResult::Ok(pubsub)
                };
                match attempt.await {
                    Ok(pubsub) => return Ok(pubsub),
                    Err(err) => last_error = Some(err),
                }
            }
            Err(last_error.unwrap_or_else(|| {
                redis::RedisError::from((
                    redis::ErrorKind::InvalidClientConfig,
                    "no node to subscribe on",
                ))
            }))
        })
        .await;
        match subscribed {
            Ok(Ok(pubsub)) => {
                let generation = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
                self.listening.store(true, Ordering::Release);
                let listening = stopped_listening(Arc::downgrade(self), generation);
                crate::util::spawn::background(
                    &self.runtime,
                    listen(
                        Arc::downgrade(self),
                        listening,
                        pubsub.into_on_message(),
                        Arc::clone(&self.shutdown),
                    ),
                );
                true
            }
            Ok(Err(err)) => {
                tracing::warn!(error = %err, "cannot subscribe for lock hand-offs; waiters poll meanwhile");
                false
            }
            Err(_) => {
                tracing::warn!("subscribing for lock hand-offs timed out; waiters poll meanwhile");
                false
            }
        }
    }
}

/// Marks the listener stopped when its task ends, also when a runtime that shut down drops the
/// task; while waiters are registered, the listener is then opened again at once on lockcore's
/// background runtime (a waiter that re-checks may open it first, on its own runtime).
fn stopped_listening(handoff: Weak<Handoff>, generation: u64) -> OnDrop<impl FnOnce()> {
    OnDrop::new(move || {
        if let Some(handoff) = handoff.upgrade()
            && handoff.generation.load(Ordering::Acquire) == generation
        {
            handoff.listening.store(false, Ordering::Release);
            // Waiters re-check now rather than at their next refresh.
            for slot in handoff.waiters().values() {
                slot.wake.notify_one();
            }
            handoff.restart_on_background();
        }
    })
}

/// Delivers wake-ups until the connection ends or the manager is gone.
async fn listen(
    handoff: Weak<Handoff>,
    _listening: OnDrop<impl FnOnce()>,
    mut messages: redis::aio::PubSubStream,
    shutdown: Arc<Notify>,
) {
    loop {
        let message = tokio::select! {
            message = messages.next() => message,
            () = shutdown.notified() => return,
        };
        let Some(handoff) = handoff.upgrade() else {
            return;
        };
        match message {
            Some(message) => {
                if let Ok(payload) = message.get_payload::<String>()
                    && let Some((token, grant)) = parse_wake_up(&payload)
                    && let Some(slot) = handoff.waiters().get(token)
                {
                    *slot.grant.lock().unwrap_or_else(PoisonError::into_inner) = Some(grant);
                    slot.wake.notify_one();
                }
            }
            None => {
                // The connection is gone (e.g. `CLIENT KILL TYPE pubsub`); `listening` wakes
                // every waiter as it drops, and the next registration subscribes again.
                tracing::warn!("lock hand-off subscription lost; waiters re-check and resubscribe");
                return;
            }
        }
    }
}

/// A registered waiter. Dropping it unregisters it.
pub(crate) struct Waiter {
    handoff: Arc<Handoff>,
    /// The token part of the waiter's lock value.
    token: String,
    slot: Arc<Slot>,
}

impl std::fmt::Debug for Waiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waiter")
            .field("token", &self.token)
            .finish_non_exhaustive()
    }
}

impl Waiter {
    /// Completes when a release handed the lock to this waiter (or the listener stopped).
    pub(crate) async fn woken(&self) {
        self.slot.wake.notified().await;
    }

    /// The latest grant delivered to this waiter, taken.
    pub(crate) fn take_grant(&self) -> Option<Grant> {
        self.slot
            .grant
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// Makes sure the listener runs (it may have stopped since registration).
    pub(crate) fn keep_listening(&self) {
        self.handoff.ensure_listener();
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        self.handoff.waiters().remove(&self.token);
    }
}
