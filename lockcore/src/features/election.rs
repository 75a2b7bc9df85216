//! Leader election: [`LockManager::campaign`] waits in the lock's fair queue until this process
//! leads, and [`Leadership`] is the lease it leads with, kept alive by the watchdog, with its
//! fencing token as the term.

use crate::error::LockError;
use crate::guard::LockGuard;
use crate::manager::LockManager;
use crate::options::LockOptions;
use crate::protocol::fencing::FencingCounter;

/// This process leads `key`: a lock lease renewed by the watchdog, whose fencing token is the
/// [`term`](Self::term). Won by [`LockManager::campaign`].
///
/// A leader must stop acting as one when [`lost`](Self::lost) completes, and must pass its
/// term to whatever it writes, so that the resource refuses a deposed leader that has not
/// noticed yet (it was paused, or its network was cut): see "Job locks and leaders" in the
/// guide (`docs/src/jobs.md`). Dropping it resigns in the background.
#[derive(Debug)]
#[must_use = "dropping the leadership resigns at once"]
pub struct Leadership {
    guard: LockGuard,
}

impl Leadership {
    /// The term: this leadership's fencing token, strictly greater than the term of every
    /// earlier leader of this key (and than every fencing token minted before it under the
    /// manager's prefix, with the default counter). A resource that stores the highest term
    /// it has seen and refuses lower ones refuses every deposed leader.
    pub fn term(&self) -> u64 {
        self.guard.fencing_token()
    }

    /// Completes when the leadership ends: the watchdog found the key expired, deleted or held
    /// by another token (at its next renewal, a third of the TTL after the last one), could not
    /// renew before the lease's deadline (Redis unreachable, this process paused past the
    /// TTL), or the manager was closed. Cancel-safe.
    pub async fn lost(&self) {
        self.guard.lost().await;
    }

    /// Local state, no network call: `true` until the leadership is known lost or its lease's
    /// deadline passes.
    pub fn is_leader(&self) -> bool {
        self.guard.is_held()
    }

    /// The full Redis key of the leadership, prefix included.
    pub fn key(&self) -> &str {
        self.guard.key()
    }

    /// The lease behind the leadership, e.g. for [`FencedRedis`](crate::FencedRedis).
    pub fn guard(&self) -> &LockGuard {
        &self.guard
    }

    /// Steps down: releases the key, and the first live campaigner queued for it is handed
    /// the leadership by this same call (single node; Redlock campaigners poll).
    ///
    /// # Errors
    /// As [`LockGuard::release`]: [`LockError::Lost`] when the leadership had already ended.
    pub async fn resign(self) -> Result<(), LockError> {
        self.guard.release().await
    }
}

impl LockManager {
    /// Campaigns for the leadership of `key` (the manager's prefix is put in front) and
    /// returns once this process leads. A campaign is an [`acquire`](Self::acquire) with the
    /// watchdog on: with [`LockOptions::handoff`] (the default) on one node it waits in the
    /// fair queue, so a resigning leader hands the leadership to the first live campaigner
    /// in one release, and a leader that died is followed once its lease expires (at most the
    /// TTL and one re-check, 250 ms, later). It waits within `opts`' wait budget;
    /// `Duration::MAX` (any budget above [`LockOptions::MAX_WAIT`]) waits until elected or an
    /// error. The TTL is how long a dead leader blocks the others.
    ///
    /// ```no_run
    /// # async fn demo(locks: lockcore::LockManager) -> Result<(), lockcore::LockError> {
    /// # async fn lead(term: u64) {}
    /// use std::time::Duration;
    /// let opts = lockcore::LockOptions::new(Duration::from_secs(3)).wait(Duration::MAX);
    /// let leadership = locks.campaign("leader:billing", &opts).await?;
    /// tokio::select! {
    ///     () = lead(leadership.term()) => leadership.resign().await?,
    ///     () = leadership.lost() => { /* stop leading: another process may lead now */ }
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// - [`LockError::InvalidOptions`] when the manager mints no fencing tokens
    ///   ([`FencingCounter::Off`]: a term is the fencing token), or as for
    ///   [`acquire`](Self::acquire);
    /// - [`LockError::Contended`] when the wait budget was spent before this process was
    ///   elected (never with an unbounded budget);
    /// - any other error of [`acquire`](Self::acquire).
    pub async fn campaign(&self, key: &str, opts: &LockOptions) -> Result<Leadership, LockError> {
        if self.shared().fencing_counter == FencingCounter::Off {
            return Err(LockError::InvalidOptions {
                reason: format!(
                    "campaign for {key:?} needs fencing tokens (the term is one); the manager was built with FencingCounter::Off"
                ),
            });
        }
        let unbounded = opts.wait_budget() > LockOptions::MAX_WAIT;
        let mut opts = opts.clone().watchdog(true);
        if unbounded {
            opts = opts.wait(LockOptions::MAX_WAIT);
        }
        // Bounded by the caller's budget: one round when it is bounded; with an unbounded one,
        // rounds of MAX_WAIT until elected or an error other than the spent round.
        loop {
            match self.acquire(key, &opts).await {
                Ok(guard) => return Ok(Leadership { guard }),
                Err(LockError::Contended { .. }) if unbounded => {}
                Err(err) => return Err(err),
            }
        }
    }
}
