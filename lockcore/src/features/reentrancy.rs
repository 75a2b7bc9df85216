//! The attribute's hold set: which keys the current task holds through `#[distributed_lock]`.
//!
//! It is a tokio task-local, set for the duration of each locked body
//! ([`tokio::task::LocalKey::scope`]), so it follows the body's future wherever it is polled,
//! not a thread. A task started with `tokio::spawn` inside a body does not inherit it: a
//! locked call there acquires (and waits) like any other holder.
//!
//! Each held key remembers its [`Kind`]: a nested call re-enters only a hold that covers what it
//! asks for ([`Kind::covers`]).

use std::future::Future;
use std::sync::Arc;

use crate::error::LockError;
use crate::features::multi::MultiGuard;
use crate::manager::LockManager;
use crate::util::escape::Escaped;

tokio::task_local! {
    static HOLDS: Holds;
}

/// Every key held by enclosing `#[distributed_lock]` calls of this task.
#[derive(Clone, Default)]
pub(crate) struct Holds(Vec<Held>);

#[derive(Clone)]
struct Held {
    manager: LockManager,
    /// The full Redis key.
    key: String,
    hold: Arc<MultiGuard>,
    kind: Kind,
}

/// How an attribute call holds its key(s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The key alone: a plain lock, a job lock, a writer (`mode = "write"`), or several keys.
    Exclusive,
    /// A reader's share (`mode = "read"`).
    Read,
    /// One permit of a semaphore of this many permits (`permits = N`).
    Permits(u32),
}

impl Kind {
    /// Whether a hold of this kind lets a nested call that asks for `asked` run under it: an
    /// exclusive hold covers everything (its holder excludes everyone); a share covers only the
    /// same share (a read a read, a permit a permit of the same count). A nested exclusive call
    /// inside a share would run beside other clients' shares, and waiting instead would wait
    /// for the task's own share: neither is allowed.
    pub(crate) fn covers(self, asked: Kind) -> bool {
        match (self, asked) {
            (Kind::Exclusive, _) | (Kind::Read, Kind::Read) => true,
            (Kind::Permits(held), Kind::Permits(asked)) => held == asked,
            _ => false,
        }
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Kind::Exclusive => f.write_str("an exclusive lock (plain, job or `mode = \"write\"`)"),
            Kind::Read => f.write_str("a read share (`mode = \"read\"`)"),
            Kind::Permits(n) => write!(f, "one of {n} permits (`permits = {n}`)"),
        }
    }
}

/// [`LockError::InvalidOptions`] for a nested call on `key` (full key) that asks for `asked`
/// under an enclosing hold of kind `held` that does not [cover](Kind::covers) it.
pub(crate) fn kind_mismatch(key: &str, held: Kind, asked: Kind) -> LockError {
    LockError::InvalidOptions {
        reason: format!(
            "`{}` is held by an enclosing `#[distributed_lock]` call of this task as {held}, and a nested call asks for it as {asked}, which that hold does not cover; only a read inside an exclusive lock or a read, or a permit inside a permit of the same count, re-enters: take the strongest kind in the outermost call",
            Escaped(key)
        ),
    }
}

/// [`LockError::InvalidOptions`] for a nested job lock (`hold_at_least_ms`) on `key` (full
/// key) inside an enclosing call that holds it: a re-entry makes no acquire, and the minimum
/// counts from one, so it would be dropped.
pub(crate) fn minimum_on_reentry(key: &str, hold_at_least_ms: u64) -> LockError {
    LockError::InvalidOptions {
        reason: format!(
            "`{}` is held by an enclosing `#[distributed_lock]` call of this task, and a nested call with `hold_at_least_ms = {hold_at_least_ms}` asks to re-enter it; its minimum counts from its own acquire, which a re-entry does not make: put `hold_at_least_ms` on the outermost call, or call the job outside the enclosing lock",
            Escaped(key)
        ),
    }
}

/// `Ok(())` when the enclosing `hold` of `manager` still holds every key, so that a nested call
/// may run under it.
///
/// # Errors
/// [`LockError::Closed`] once the manager was closed (close released the hold);
/// [`LockError::Lost`] naming the first key whose lease ended.
pub(crate) fn still_held(manager: &LockManager, hold: &MultiGuard) -> Result<(), LockError> {
    manager.ensure_open()?;
    match hold.guards().iter().find(|guard| !guard.is_held()) {
        Some(lost) => Err(LockError::Lost {
            key: lost.key().to_owned(),
        }),
        None => Ok(()),
    }
}

/// What the enclosing calls hold of a key set.
pub(crate) enum Enclosing {
    /// None of the keys.
    None,
    /// Every key, through one enclosing call, held as `kind`.
    All { hold: Arc<MultiGuard>, kind: Kind },
    /// This key is held, but not the whole set through one call.
    Partly { key: String },
}

/// Looks `keys` (full Redis keys) of `manager` up in the current task's hold set.
pub(crate) fn enclosing(manager: &LockManager, keys: &[String]) -> Enclosing {
    HOLDS
        .try_with(|holds| {
            let found: Vec<Option<&Held>> = keys
                .iter()
                .map(|key| {
                    holds
                        .0
                        .iter()
                        .find(|held| held.key == *key && held.manager.same_as(manager))
                })
                .collect();
            let Some(first) = found.iter().flatten().next() else {
                return Enclosing::None;
            };
            let one_hold = found
                .iter()
                .all(|held| held.is_some_and(|held| Arc::ptr_eq(&held.hold, &first.hold)));
            if one_hold {
                Enclosing::All {
                    hold: Arc::clone(&first.hold),
                    kind: first.kind,
                }
            } else {
                Enclosing::Partly {
                    key: first.key.clone(),
                }
            }
        })
        .unwrap_or(Enclosing::None)
}

/// Runs `body` with `hold`'s keys added to the task's hold set, held as `kind`.
pub(crate) async fn holding<F: Future>(
    manager: &LockManager,
    hold: &Arc<MultiGuard>,
    kind: Kind,
    body: F,
) -> F::Output {
    let mut holds = HOLDS.try_with(Holds::clone).unwrap_or_default();
    holds.0.extend(hold.keys().map(|key| Held {
        manager: manager.clone(),
        key: key.to_owned(),
        hold: Arc::clone(hold),
        kind,
    }));
    HOLDS.scope(holds, body).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reentrancy table of the attribute chapter.
    #[test]
    fn a_hold_covers_only_what_it_excludes_others_from() {
        use Kind::{Exclusive, Permits, Read};
        let kinds = [Exclusive, Read, Permits(3), Permits(5)];
        for asked in kinds {
            assert!(Exclusive.covers(asked), "exclusive covers {asked:?}");
        }
        assert!(Read.covers(Read));
        assert!(Permits(3).covers(Permits(3)));
        for (held, asked) in [
            (Read, Exclusive),
            (Read, Permits(3)),
            (Permits(3), Exclusive),
            (Permits(3), Read),
            (Permits(3), Permits(5)),
        ] {
            assert!(!held.covers(asked), "{held:?} must not cover {asked:?}");
            let LockError::InvalidOptions { reason } = kind_mismatch("lock:k", held, asked) else {
                panic!("expected InvalidOptions");
            };
            assert!(
                reason.contains(&held.to_string()) && reason.contains(&asked.to_string()),
                "{reason}"
            );
        }
    }
}
