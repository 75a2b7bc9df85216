//! Not public API: what `#[distributed_lock]`'s expansion calls. May change in any release.
//!
//! The expansion is, in order: [`lock`] (manager, keys, [`Settings`]) → on an error
//! [`LockResult::from_lock_error`], [`skip`] or [`fallback`] → [`Lock::run`] (the body) →
//! [`Lock::finish`] (the release).

use std::any::Any;
use std::borrow::Borrow;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use tracing::Instrument;

use crate::error::LockError;
use crate::features::multi::MultiGuard;
use crate::features::reentrancy::{self, Enclosing, Kind};
use crate::guard::LockGuard;
use crate::manager::LockManager;
use crate::options::LockOptions;
use crate::util::escape::Escaped;

mod policy;
pub mod scripts;

pub use policy::{Fallback, FallbackFuture, Skipped, fallback, skip};

#[cfg(feature = "idempotency")]
pub use crate::features::idempotency::{Record, entry as idempotent};

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
    crate::global::default_manager()
}

/// A handle from `manager = EXPR`: `LockManager`, `&LockManager` or `Arc<LockManager>`.
pub fn manager<M: Borrow<LockManager>>(m: &M) -> Result<LockManager, LockError> {
    Ok(m.borrow().clone())
}

/// What the wrapper does when the lock is lost while the body runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnLost {
    /// Drop the body at its next `.await` and return `Err(Lost)`.
    Abort,
    /// Let the body finish and log the loss.
    Continue,
}

/// The attribute's arguments that reach the runtime; `None` is "the manager's default".
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// `ttl_ms`.
    pub ttl_ms: Option<u64>,
    /// `wait_ms`.
    pub wait_ms: Option<u64>,
    /// `watchdog`: else the manager's explicit choice, else on.
    pub watchdog: Option<bool>,
    /// `reentrant`.
    pub reentrant: bool,
    /// `on_lost`.
    pub on_lost: OnLost,
    /// The key template(s) as written, for holder metadata and metric labels.
    pub key_template: &'static str,
}

/// The manager's default options with the attribute's overrides. The watchdog is the
/// attribute's `watchdog` argument, else the manager's explicit choice, else on.
fn options(manager: &LockManager, settings: &Settings) -> LockOptions {
    let defaults = manager.default_options();
    let watchdog = settings
        .watchdog
        .or(defaults.watchdog_choice())
        .unwrap_or(true);
    let mut opts = defaults.clone().watchdog(watchdog);
    if let Some(ttl) = settings.ttl_ms {
        opts = opts.with_ttl(Duration::from_millis(ttl));
    }
    if let Some(wait) = settings.wait_ms {
        opts = opts.wait(Duration::from_millis(wait));
    }
    opts.with_key_template(settings.key_template)
}

/// `opts` with a key template, for holder metadata and metric labels (what the attribute's
/// settings carry; tests use it to label explicit acquisitions the same way).
pub fn with_key_template(opts: LockOptions, template: &'static str) -> LockOptions {
    opts.with_key_template(template)
}

/// The locks a call runs under: taken by this call, or held by an enclosing call of the same
/// task (reentrant).
#[derive(Debug)]
pub struct Lock {
    manager: LockManager,
    hold: Arc<MultiGuard>,
    /// This call acquired the keys, so it releases them.
    owner: bool,
    /// The index in `hold` of this call's first key, for [`Lock::guard`].
    first: usize,
    /// How this call holds its keys, for the nested calls of its body.
    kind: Kind,
    on_lost: OnLost,
}

/// Acquires `keys` (rendered templates, without the prefix) in canonical order, or re-enters
/// them when an enclosing call of this task holds them all, in a kind that covers this call's
/// (an exclusive hold covers every kind; a read share a read; a permit a permit of the same
/// count).
///
/// A nested call re-enters only a hold that is still held: once the manager was closed it
/// fails with [`LockError::Closed`], once the enclosing lease ended with [`LockError::Lost`]
/// (its body never runs, never beside another holder).
///
/// # Errors
/// `manager`'s error; [`LockError::AlreadyHeld`] at once when a key is held by an enclosing
/// call and `reentrant` is off (or only part of the set is held);
/// [`LockError::InvalidOptions`] at once, naming both kinds, when the enclosing hold does not
/// cover this call's kind (a write or plain lock inside a share, another permit count, a read
/// inside permits or permits inside a read); [`LockError::Closed`] or [`LockError::Lost`] when
/// the enclosing hold is no longer held; else as [`LockManager::acquire_many`].
pub async fn lock<I>(
    manager: Result<LockManager, LockError>,
    keys: I,
    settings: Settings,
) -> Result<Lock, LockError>
where
    I: IntoIterator<Item = String>,
{
    lock_as(manager, keys, settings, None, None).await
}

/// What `permits = N` (N ≥ 2) and `mode = "read"` ask for: one share of the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Share {
    /// One permit of a semaphore of this many permits ([`LockManager::semaphore`]).
    Permits(u32),
    /// A reader's share ([`LockManager::rw_lock`], [`crate::RwLock::read`]).
    Read,
}

/// [`lock`] of one share of the (one) key: a semaphore's permit or a reader's share.
///
/// # Errors
/// As [`lock`], and as [`crate::Semaphore::acquire`] / [`crate::RwLock::read`].
pub async fn lock_shared<I>(
    manager: Result<LockManager, LockError>,
    keys: I,
    settings: Settings,
    share: Share,
) -> Result<Lock, LockError>
where
    I: IntoIterator<Item = String>,
{
    lock_as(manager, keys, settings, Some(share), None).await
}

/// [`lock`] of a job lock: `hold_at_least_ms` (see [`LockOptions::hold_at_least`]).
///
/// A job lock never re-enters: its minimum counts from its own acquire, which a re-entry does
/// not make.
///
/// # Errors
/// As [`lock`]; [`LockError::InvalidOptions`] when the minimum exceeds the ttl (the manager's
/// default ttl, when the attribute has no `ttl_ms`), and at once, naming the key and the
/// minimum, when an enclosing call of this task holds the key (`reentrant` on).
pub async fn lock_job<I>(
    manager: Result<LockManager, LockError>,
    keys: I,
    hold_at_least_ms: u64,
    settings: Settings,
) -> Result<Lock, LockError>
where
    I: IntoIterator<Item = String>,
{
    lock_as(manager, keys, settings, None, Some(hold_at_least_ms)).await
}

async fn lock_as<I>(
    manager: Result<LockManager, LockError>,
    keys: I,
    settings: Settings,
    share: Option<Share>,
    hold_at_least_ms: Option<u64>,
) -> Result<Lock, LockError>
where
    I: IntoIterator<Item = String>,
{
    let manager = manager?;
    let keys = crate::features::multi::canonical(keys);
    let full = keys
        .iter()
        .map(|key| crate::protocol::keyspace::full_key(manager.key_prefix(), key))
        .collect::<Result<Vec<_>, _>>()?;
    let kind = match share {
        Some(Share::Permits(n)) => Kind::Permits(n),
        Some(Share::Read) => Kind::Read,
        None => Kind::Exclusive,
    };
    let (hold, owner) = match reentrancy::enclosing(&manager, &full) {
        Enclosing::None => {
            let mut opts = options(&manager, &settings);
            if let Some(ms) = hold_at_least_ms {
                opts = opts.hold_at_least(Duration::from_millis(ms));
            }
            let hold = match (share, keys.first()) {
                (Some(Share::Permits(n)), Some(key)) => {
                    let guard = manager.semaphore(key, n).acquire(&opts).await?;
                    MultiGuard::single(guard, manager.key_prefix())
                }
                (Some(Share::Read), Some(key)) => {
                    let guard = manager.rw_lock(key).read(&opts).await?;
                    MultiGuard::single(guard, manager.key_prefix())
                }
                _ => manager.acquire_many(&keys, &opts).await?,
            };
            (Arc::new(hold), true)
        }
        Enclosing::All { hold, kind: held } if settings.reentrant => {
            let key = full.first().map(String::as_str).unwrap_or_default();
            if !held.covers(kind) {
                return Err(reentrancy::kind_mismatch(key, held, kind));
            }
            if let Some(ms) = hold_at_least_ms {
                return Err(reentrancy::minimum_on_reentry(key, ms));
            }
            reentrancy::still_held(&manager, &hold)?;
            (hold, false)
        }
        Enclosing::All { .. } => {
            let key = full.into_iter().next().unwrap_or_default();
            return Err(LockError::AlreadyHeld { key });
        }
        Enclosing::Partly { key } => return Err(LockError::AlreadyHeld { key }),
    };
    let first = full
        .first()
        .and_then(|key| hold.guards().iter().position(|g| g.key() == key))
        .unwrap_or(0);
    Ok(Lock {
        manager,
        hold,
        owner,
        first,
        kind,
        on_lost: settings.on_lost,
    })
}

impl Lock {
    /// The guard of the call's key (`key = ..`; with `keys`, the first in canonical order).
    pub fn guard(&self) -> &LockGuard {
        &self.hold.guards()[self.first]
    }

    /// Every guard of the call (`keys = [..]`); a reentrant call sees its caller's set.
    pub fn guards(&self) -> &MultiGuard {
        &self.hold
    }

    /// Runs the body with the keys in the task's hold set, catching a panic so that the lock
    /// is released before it resumes.
    ///
    /// With [`OnLost::Abort`] and the watchdog on, the body is dropped at its next `.await`
    /// once a lock is lost. Without the watchdog nothing renews or watches the lease, so the
    /// body always runs to completion and a lease that ran out is reported by
    /// [`finish`](Self::finish).
    pub async fn run<F: Future>(&self, body: F) -> Outcome<F::Output> {
        let span =
            crate::lease::telemetry::body_span(self.guard().key(), self.guard().key_template());
        let body = AssertUnwindSafe(body.instrument(span)).catch_unwind();
        let body = async {
            if self.on_lost == OnLost::Abort && self.hold.is_watched() {
                tokio::select! {
                    biased;
                    result = body => Some(result),
                    () = self.hold.lost() => None,
                }
            } else {
                Some(body.await)
            }
        };
        let result = if self.owner {
            reentrancy::holding(&self.manager, &self.hold, self.kind, body).await
        } else {
            body.await
        };
        Outcome(match result {
            Some(Ok(value)) => Ended::Returned(value),
            Some(Err(payload)) => Ended::Panicked(payload),
            None => Ended::Aborted,
        })
    }

    /// Releases the locks (only the call that took them), then returns the body's value,
    /// resumes its panic, or returns `Err(Lost)` for an aborted body. A failed release never
    /// replaces the body's result: it is logged through `tracing`.
    pub async fn finish<T>(self, outcome: Outcome<T>) -> Result<T, LockError> {
        let lost_key = self.hold.lost_key();
        if self.owner {
            match Arc::try_unwrap(self.hold) {
                Ok(hold) => {
                    if let Err(err) = hold.release().await {
                        // Lost: the body ran past its lease (another holder may have been in);
                        // Redis: the release is retried in the background by the guard's `Drop`.
                        tracing::warn!(key = %Escaped(&lost_key), error = %err, "`#[distributed_lock]` could not release the lock after the body; returning the body's result");
                    }
                }
                // A nested call's future escaped the body and still shares the hold: the last
                // one to drop it releases (without blocking).
                Err(_) => tracing::debug!(
                    key = %Escaped(&lost_key),
                    "the lock is still shared by a nested call; it is released when that ends"
                ),
            }
        }
        match outcome.0 {
            Ended::Returned(value) => Ok(value),
            Ended::Panicked(payload) => std::panic::resume_unwind(payload),
            Ended::Aborted => Err(LockError::Lost { key: lost_key }),
        }
    }
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
