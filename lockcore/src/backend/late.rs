//! [`LateRounds`]: the Redlock rounds that were won while some nodes had not answered yet, and
//! whose requests to those nodes still run in the background (`Redlock::finish`).
//!
//! A late node's `SET` can run after the lock's release has reached that node: its request
//! may not be on the wire yet when the round is won (its connection is opening, or it is sent
//! again after `NOSCRIPT`), and the release then overtakes it. A release marks the token here,
//! and each late reply that comes after the mark is followed by a compare-and-delete on its
//! node, so a released lock never lives on in a late node until its TTL.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// The tokens of won rounds with late requests in flight, and for each, `Some(hold)` once the
/// lock was released (with its minimum hold, if any).
#[derive(Debug, Default)]
pub(crate) struct LateRounds {
    rounds: Mutex<HashMap<String, Option<Option<Duration>>>>,
}

impl LateRounds {
    fn rounds(&self) -> MutexGuard<'_, HashMap<String, Option<Option<Duration>>>> {
        // Map updates never panic half-way; a poisoned lock still holds a valid map.
        self.rounds.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A won round of `token` has late requests in flight.
    pub(crate) fn started(&self, token: &str) {
        self.rounds().insert(token.to_owned(), None);
    }

    /// The lock of `token` is being released (keeping `hold`); a no-op unless a round of it
    /// has late requests in flight.
    pub(crate) fn release(&self, token: &str, hold: Option<Duration>) {
        if let Some(released) = self.rounds().get_mut(token) {
            *released = Some(hold);
        }
    }

    /// `Some(hold)` when the lock of `token` was released: a late reply that comes now must be
    /// followed by a compare-and-delete on its node.
    pub(crate) fn released(&self, token: &str) -> Option<Option<Duration>> {
        self.rounds().get(token).copied().flatten()
    }

    /// The round's late requests have all finished.
    pub(crate) fn ended(&self, token: &str) {
        self.rounds().remove(token);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_release_is_seen_only_while_the_round_runs() {
        let late = LateRounds::default();
        late.release("t", None);
        assert_eq!(late.released("t"), None, "no round: nothing recorded");
        late.started("t");
        assert_eq!(late.released("t"), None);
        late.release("t", Some(Duration::from_secs(1)));
        assert_eq!(late.released("t"), Some(Some(Duration::from_secs(1))));
        late.ended("t");
        assert_eq!(late.released("t"), None);
        assert!(late.rounds().is_empty());
    }
}
