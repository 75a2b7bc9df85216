//! Not public API: what `#[distributed_lock]`'s expansion calls. May change in any release.

use std::any::Any;
use std::borrow::Borrow;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures_util::FutureExt;
use tracing::Instrument;

use crate::{LockError, LockGuard, LockManager, LockOptions};

/// Converts a [`LockError`] into the wrapped fn's return type.
#[diagnostic::on_unimplemented(
    message = "`#[distributed_lock]` cannot return a lock error through `{Self}`",
    label = "this return type cannot carry a `lockcore::LockError`",
    note = "the return type must be `Result<T, E>` where `E: From<lockcore::LockError>`",
    note = "add `impl From<lockcore::LockError> for E` (thiserror: a `#[from] lockcore::LockError` variant)"
)]
pub trait LockResult {
    /// `Err(E::from(e))`.
    fn from_lock_error(e: LockError) -> Self;
}

impl<T, E: From<LockError>> LockResult for Result<T, E> {
    fn from_lock_error(e: LockError) -> Self {
        Err(E::from(e))
    }
}

/// The default manager.
pub fn default_manager() -> Result<LockManager, LockError> {
    crate::default_manager()
}

/// A handle from `manager = EXPR`: `LockManager`, `&LockManager` or `Arc<LockManager>`.
pub fn manager<M: Borrow<LockManager>>(m: &M) -> LockManager {
    m.borrow().clone()
}

/// The manager's default options with the attribute's overrides.
pub fn options(
    manager: &LockManager,
    ttl_ms: Option<u64>,
    wait_ms: Option<u64>,
    watchdog: bool,
) -> LockOptions {
    let mut opts = manager.default_options().clone().watchdog(watchdog);
    if let Some(ttl) = ttl_ms {
        opts = opts.with_ttl(Duration::from_millis(ttl));
    }
    if let Some(wait) = wait_ms {
        opts = opts.wait(Duration::from_millis(wait));
    }
    opts
}

/// `opts` with the attribute's key template, for holder metadata and metric labels.
/// The expansion may call this on the result of [`options`].
pub fn with_key_template(opts: LockOptions, template: &'static str) -> LockOptions {
    opts.with_key_template(template)
}

/// `manager.acquire(key, opts)`.
pub async fn acquire(
    manager: &LockManager,
    key: &str,
    opts: &LockOptions,
) -> Result<LockGuard, LockError> {
    manager.acquire(key, opts).await
}

/// What the wrapper does when the lock is lost while the body runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnLost {
    /// Drop the body at its next `.await` and return `Err(Lost)`.
    Abort,
    /// Let the body finish and log the loss.
    Continue,
}

/// How the body ended.
pub struct Outcome<T>(Ended<T>);

impl<T> std::fmt::Debug for Outcome<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.0 {
            Ended::Returned(_) => "Outcome::Returned",
            Ended::Panicked(_) => "Outcome::Panicked",
            Ended::Aborted => "Outcome::Aborted",
        })
    }
}

enum Ended<T> {
    Returned(T),
    Panicked(Box<dyn Any + Send + 'static>),
    /// The lock was lost and the body was dropped (`on_lost = "abort"`).
    Aborted,
}

/// Runs the body, catching a panic so that the lock is released before it resumes.
///
/// With [`OnLost::Abort`] and the watchdog on, the body is dropped at its next `.await` once
/// the lock is lost. Without the watchdog nothing renews or watches the lease, so the body
/// always runs to completion and a lease that ran out is reported by [`finish`].
pub async fn run_body<F: Future>(
    guard: &LockGuard,
    on_lost: OnLost,
    body: F,
) -> Outcome<F::Output> {
    let body = AssertUnwindSafe(body.instrument(crate::telemetry::body_span(guard))).catch_unwind();
    let result = if on_lost == OnLost::Abort && guard.is_watched() {
        tokio::select! {
            biased;
            result = body => result,
            () = guard.lost() => return Outcome(Ended::Aborted),
        }
    } else {
        body.await
    };
    match result {
        Ok(value) => Outcome(Ended::Returned(value)),
        Err(payload) => Outcome(Ended::Panicked(payload)),
    }
}

/// Releases the lock, then returns the body's value, resumes its panic, or returns
/// `Err(Lost)` for an aborted body. A failed release never replaces the body's result: it is
/// logged through `tracing`.
pub async fn finish<T>(guard: LockGuard, outcome: Outcome<T>) -> Result<T, LockError> {
    let key = guard.key().to_owned();
    if let Err(err) = guard.release().await {
        // Lost: the body ran past its lease (another holder may have been in); Redis: the
        // release is retried in the background by the guard's `Drop`.
        tracing::warn!(key, error = %err, "`#[distributed_lock]` could not release the lock after the body; returning the body's result");
    }
    match outcome.0 {
        Ended::Returned(value) => Ok(value),
        Ended::Panicked(payload) => std::panic::resume_unwind(payload),
        Ended::Aborted => Err(LockError::Lost { key }),
    }
}
