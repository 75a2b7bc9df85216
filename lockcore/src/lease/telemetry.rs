//! Tracing spans and events, and (cargo feature `metrics`) metrics through the `metrics` facade.
//!
//! Keys in span and event fields are shown with `{:?}`-style escapes for control characters
//! (a key may come from request data).
//!
//! # Spans (target `lockcore`)
//! | span | level | fields |
//! |---|---|---|
//! | `lock.acquire` | debug | `key` (rendered, prefix included), `key_template` (`"-"` when not from the attribute), `outcome`, `attempts`, `waited_ms`, `fencing_token` |
//! | `lock.body` | debug | `key`, `key_template`: the body under `#[distributed_lock]` |
//! | `lock.release` | debug | `key`, `key_template`, `held_ms` |
//! | `lock.renew` | trace | `keys`: one watchdog batch |
//!
//! # Events
//! - contention: `debug`, once per acquire call (not per retry);
//! - loss (the watchdog or an extend found the lease gone, or it ran out): `warn`;
//! - a failed watchdog renewal that is retried within the lease's validity: `debug`.
//!
//! # Metrics
//! Labelled by `key_template` (the attribute's template, or `"-"`) and an outcome or reason,
//! never by the rendered key, so that their cardinality stays bounded.
//!
//! | metric | kind | labels |
//! |---|---|---|
//! | `lockcore_acquisitions_total` | counter | `key_template`, `outcome`: `acquired`, `contended`, `busy` (`try_acquire`), `error`, `cancelled` |
//! | `lockcore_wait_seconds` | histogram | `key_template`, `outcome`: from the call to its outcome |
//! | `lockcore_handoffs_total` | counter | `key_template`: acquisitions by a waiter that had queued for hand-off |
//! | `lockcore_hold_seconds` | histogram | `key_template`: from the guard being returned to its release (or drop); a waiter's wait is not held time |
//! | `lockcore_releases_total` | counter | `key_template`, `outcome`: `released`, `lost`, `unconfirmed` (Redlock: not confirmed by a quorum in time; finished in the background), `closed` (released by `LockManager::close`), `dropped` (released in the background: a dropped guard, or after a failed release) |
//! | `lockcore_renewals_total` | counter | `key_template`, `outcome`: `renewed`, `failed` (retried) |
//! | `lockcore_losses_total` | counter | `key_template`, `reason`: `expired`, `max_hold`, `late_renewal`, `taken`, `extend_refused` |
//! | `lockcore_contended_calls_total` | counter | `key_template`, `policy`: `skip` (`on_contended = "skip"`: the body did not run), `fallback` (`fallback = ..` ran instead) |

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use tracing::field::Empty;

use crate::backend::waiting::Progress;
use crate::error::LockError;
use crate::lease::state::Lease;
use crate::util::escape::Escaped;

/// The label for locks that did not come from the attribute.
pub(crate) const NO_TEMPLATE: &str = "-";

fn template_label(template: Option<&'static str>) -> &'static str {
    template.unwrap_or(NO_TEMPLATE)
}

/// One acquire call: its span, attempts and outcome. Dropped unfinished, the call was
/// cancelled (its future dropped).
pub(crate) struct AcquireProbe {
    span: tracing::Span,
    template: &'static str,
    /// `None` when neither the span nor metrics want the wait (no clock read then).
    started: Option<Instant>,
    attempts: AtomicU32,
    queued: AtomicBool,
    contended: AtomicBool,
    /// A release handed the lock over (no further attempt was needed).
    handed_over: AtomicBool,
    finished: bool,
}

impl AcquireProbe {
    /// Starts the `lock.acquire` span for the full key `prefix` + `key`.
    pub(crate) fn start(prefix: &str, key: &str, template: Option<&'static str>) -> Self {
        let template = template_label(template);
        let span = tracing::debug_span!(
            target: "lockcore",
            "lock.acquire",
            key = %format_args!("{}{}", Escaped(prefix), Escaped(key)),
            key_template = template,
            outcome = Empty,
            attempts = Empty,
            waited_ms = Empty,
            fencing_token = Empty,
        );
        let started = (cfg!(feature = "metrics") || !span.is_disabled()).then(Instant::now);
        AcquireProbe {
            span,
            template,
            started,
            attempts: AtomicU32::new(0),
            queued: AtomicBool::new(false),
            contended: AtomicBool::new(false),
            handed_over: AtomicBool::new(false),
            finished: false,
        }
    }

    /// The span to instrument the call with.
    pub(crate) fn span(&self) -> tracing::Span {
        self.span.clone()
    }

    /// Records the outcome on the span and in the metrics: a guard's fencing token, `None`
    /// for a `try_acquire` that found the key held, or the error.
    pub(crate) fn finish(mut self, result: Result<Option<u64>, &LockError>) {
        self.finished = true;
        let outcome = match result {
            Ok(Some(fencing_token)) => {
                self.span.record("fencing_token", fencing_token);
                if self.handed_over.load(Ordering::Relaxed)
                    || (self.queued.load(Ordering::Relaxed)
                        && self.attempts.load(Ordering::Relaxed) > 1)
                {
                    count_handoff(self.template);
                }
                "acquired"
            }
            Ok(None) => "busy",
            Err(LockError::Contended { .. }) => "contended",
            Err(_) => "error",
        };
        self.record(outcome);
    }

    fn record(&self, outcome: &'static str) {
        let Some(started) = self.started else {
            return;
        };
        let waited = started.elapsed();
        self.span.record("outcome", outcome);
        self.span
            .record("attempts", self.attempts.load(Ordering::Relaxed));
        self.span
            .record("waited_ms", u64::try_from(waited.as_millis()).unwrap_or(0));
        if outcome == "contended" {
            tracing::debug!(target: "lockcore", parent: &self.span, "wait budget spent; lock contended");
        }
        count_acquire(self.template, outcome, waited);
    }
}

impl Progress for AcquireProbe {
    /// One more attempt is being sent.
    fn attempt(&self) {
        self.attempts.fetch_add(1, Ordering::Relaxed);
    }

    /// The call registered in the hand-off queue.
    fn queued(&self) {
        self.queued.store(true, Ordering::Relaxed);
    }

    /// A release's grant handed the lock to this call.
    fn handed_over(&self) {
        self.handed_over.store(true, Ordering::Relaxed);
    }

    /// An attempt found the key held: logged once per call, at debug.
    fn held(&self, key: &str, holder_ttl: Option<Duration>) {
        if !self.contended.swap(true, Ordering::Relaxed) {
            let holder_ttl_ms = holder_ttl.map(|t| u64::try_from(t.as_millis()).unwrap_or(0));
            tracing::debug!(target: "lockcore", key = %Escaped(key), holder_ttl_ms, "lock contended; waiting");
        }
    }
}

impl Drop for AcquireProbe {
    fn drop(&mut self) {
        if !self.finished {
            self.record("cancelled");
        }
    }
}

/// The `lock.body` span of a body under the attribute.
pub(crate) fn body_span(key: &str, key_template: &'static str) -> tracing::Span {
    tracing::debug_span!(
        target: "lockcore",
        "lock.body",
        key = %Escaped(key),
        key_template,
    )
}

/// The `lock.release` span of a guard's release.
pub(crate) fn release_span(lease: &Lease) -> tracing::Span {
    tracing::debug_span!(
        target: "lockcore",
        "lock.release",
        key = %Escaped(&lease.key),
        key_template = template_label(lease.key_template),
        held_ms = u64::try_from(lease.held_since.elapsed().as_millis()).unwrap_or(0),
    )
}

/// A release answered (`outcome`: `released`, `lost`, `unconfirmed`, `error`) or a guard was dropped
/// (`dropped`: released in the background).
pub(crate) fn released(lease: &Lease, outcome: &'static str) {
    if !cfg!(feature = "metrics") && !tracing::enabled!(target: "lockcore", tracing::Level::DEBUG) {
        return;
    }
    let held = lease.held_since.elapsed();
    tracing::debug!(target: "lockcore", key = %Escaped(&lease.key), outcome, held_ms = u64::try_from(held.as_millis()).unwrap_or(0), "lock released");
    count_release(template_label(lease.key_template), outcome, held);
}

/// The `lock.renew` span of one watchdog batch.
pub(crate) fn renew_span(keys: usize) -> tracing::Span {
    tracing::trace_span!(target: "lockcore", "lock.renew", keys)
}

/// The watchdog renewed `lease`.
pub(crate) fn renewed(lease: &Lease) {
    count_renewal(template_label(lease.key_template), "renewed");
}

/// A watchdog batch failed and will be retried within the leases' validity: debug, not warn
/// (one line per retry would flood an operator's log).
pub(crate) fn renewal_failed(leases: &[&Lease], error: &LockError) {
    tracing::debug!(target: "lockcore", error = %error, keys = leases.len(), "watchdog renewal failed; retrying within the leases' validity");
    for lease in leases {
        count_renewal(template_label(lease.key_template), "failed");
    }
}

/// The lease is lost: a warning with the key and why, and the loss counter.
pub(crate) fn lost(lease: &Lease, reason: &'static str, message: &'static str) {
    tracing::warn!(target: "lockcore", key = %Escaped(&lease.key), key_template = template_label(lease.key_template), reason, "{message}");
    count_loss(template_label(lease.key_template), reason);
}

/// A contended call under `#[distributed_lock]` that did not run its body: `policy` is
/// `skip` or `fallback`. Counted by template and policy only (the caller logs the rendered key).
pub(crate) fn contended_call(key_template: &'static str, policy: &'static str) {
    count_contended_call(key_template, policy);
}

#[cfg(feature = "metrics")]
mod sink {
    use std::time::Duration;

    pub(super) fn count_acquire(template: &'static str, outcome: &'static str, waited: Duration) {
        let labels = [("key_template", template), ("outcome", outcome)];
        metrics::counter!("lockcore_acquisitions_total", &labels).increment(1);
        metrics::histogram!("lockcore_wait_seconds", &labels).record(waited.as_secs_f64());
    }

    pub(super) fn count_handoff(template: &'static str) {
        metrics::counter!("lockcore_handoffs_total", "key_template" => template).increment(1);
    }

    pub(super) fn count_release(template: &'static str, outcome: &'static str, held: Duration) {
        metrics::counter!("lockcore_releases_total", "key_template" => template, "outcome" => outcome)
            .increment(1);
        metrics::histogram!("lockcore_hold_seconds", "key_template" => template)
            .record(held.as_secs_f64());
    }

    pub(super) fn count_renewal(template: &'static str, outcome: &'static str) {
        metrics::counter!("lockcore_renewals_total", "key_template" => template, "outcome" => outcome)
            .increment(1);
    }

    pub(super) fn count_loss(template: &'static str, reason: &'static str) {
        metrics::counter!("lockcore_losses_total", "key_template" => template, "reason" => reason)
            .increment(1);
    }

    pub(super) fn count_contended_call(template: &'static str, policy: &'static str) {
        metrics::counter!("lockcore_contended_calls_total", "key_template" => template, "policy" => policy)
            .increment(1);
    }
}

#[cfg(not(feature = "metrics"))]
mod sink {
    use std::time::Duration;

    pub(super) fn count_acquire(_: &'static str, _: &'static str, _: Duration) {}
    pub(super) fn count_handoff(_: &'static str) {}
    pub(super) fn count_release(_: &'static str, _: &'static str, _: Duration) {}
    pub(super) fn count_renewal(_: &'static str, _: &'static str) {}
    pub(super) fn count_loss(_: &'static str, _: &'static str) {}
    pub(super) fn count_contended_call(_: &'static str, _: &'static str) {}
}

use sink::{
    count_acquire, count_contended_call, count_handoff, count_loss, count_release, count_renewal,
};
