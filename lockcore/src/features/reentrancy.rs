//! The attribute's hold set: which keys the current task holds through `#[distributed_lock]`.
//!
//! It is a tokio task-local, set for the duration of each locked body
//! ([`tokio::task::LocalKey::scope`]), so it follows the body's future wherever it is polled,
//! not a thread. A task started with `tokio::spawn` inside a body does not inherit it: a
//! locked call there acquires (and waits) like any other holder.

use std::future::Future;
use std::sync::Arc;

use crate::features::multi::MultiGuard;
use crate::manager::LockManager;

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
}

/// What the enclosing calls hold of a key set.
pub(crate) enum Enclosing {
    /// None of the keys.
    None,
    /// Every key, through one enclosing call.
    All(Arc<MultiGuard>),
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
                Enclosing::All(Arc::clone(&first.hold))
            } else {
                Enclosing::Partly {
                    key: first.key.clone(),
                }
            }
        })
        .unwrap_or(Enclosing::None)
}

/// Runs `body` with `hold`'s keys added to the task's hold set.
pub(crate) async fn holding<F: Future>(
    manager: &LockManager,
    hold: &Arc<MultiGuard>,
    body: F,
) -> F::Output {
    let mut holds = HOLDS.try_with(Holds::clone).unwrap_or_default();
    holds.0.extend(hold.keys().map(|key| Held {
        manager: manager.clone(),
        key: key.to_owned(),
        hold: Arc::clone(hold),
    }));
    HOLDS.scope(holds, body).await
}
