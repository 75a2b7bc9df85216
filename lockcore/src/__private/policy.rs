//! `on_contended = "skip"` and `fallback = path`: what a contended call returns instead.

use std::future::{Future, Ready, ready};

use crate::error::LockError;
use crate::util::escape::Escaped;
use crate::util::time::Shown;

use super::LockResult;

/// The value of a skipped call: `Ok(())` or `Ok(None)`.
#[diagnostic::on_unimplemented(
    message = "`on_contended = \"skip\"` cannot return `{Self}`",
    label = "`skip` needs `Result<(), E>` or `Result<Option<T>, E>`",
    note = "a skipped call returns `Ok(())` for `Result<(), E>` and `Ok(None)` for `Result<Option<T>, E>`; use `fallback = path` for any other return type"
)]
pub trait Skipped {
    /// `Ok(())` or `Ok(None)`.
    fn skipped() -> Self;
}

impl<E> Skipped for Result<(), E> {
    fn skipped() -> Self {
        Ok(())
    }
}

impl<T, E> Skipped for Result<Option<T>, E> {
    fn skipped() -> Self {
        Ok(None)
    }
}

/// `on_contended = "skip"`: `Ok(())`/`Ok(None)` for a contended lock (logged at debug and
/// counted under `key_template`), the error otherwise.
pub fn skip<R: LockResult + Skipped>(error: LockError, key_template: &'static str) -> R {
    match error {
        LockError::Contended { key, waited } => {
            tracing::debug!(
                key = %Escaped(&key),
                key_template,
                waited = %Shown(waited),
                "`#[distributed_lock]` skipped the body: the lock is contended"
            );
            crate::lease::telemetry::contended_call(key_template, "skip");
            R::skipped()
        }
        error => R::from_lock_error(error),
    }
}

/// `fallback = path`: `true` (a debug event, and a count under `key_template`) when the error
/// is a contended lock, so the fallback runs instead of the body.
pub fn fallback(error: &LockError, key_template: &'static str) -> bool {
    let LockError::Contended { key, waited } = error else {
        return false;
    };
    tracing::debug!(
        key = %Escaped(key),
        key_template,
        waited = %Shown(*waited),
        "`#[distributed_lock]` called the fallback: the lock is contended"
    );
    crate::lease::telemetry::contended_call(key_template, "fallback");
    true
}

/// The fallback's value, awaited whether the fallback is an `async fn` or a plain `fn`:
/// `Fallback(value).resolve().await`.
#[derive(Debug)]
pub struct Fallback<X>(pub X);

impl<T, E> Fallback<Result<T, E>> {
    /// A plain `fn`'s value, ready at once (an inherent method: it wins over the trait's).
    pub fn resolve(self) -> Ready<Result<T, E>> {
        ready(self.0)
    }
}

/// An `async fn`'s future.
pub trait FallbackFuture {
    /// The future itself.
    type Future;
    /// The future itself.
    fn resolve(self) -> Self::Future;
}

impl<F: Future> FallbackFuture for Fallback<F> {
    type Future = F;
    fn resolve(self) -> F {
        self.0
    }
}
