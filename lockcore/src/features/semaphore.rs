//! [`Semaphore`]: at most N holders of one key at once, each holding a permit that is a lease
//! of its own.
//!
//! A permit is a member of the key's share set (a Redis sorted set, see
//! [`keyspace::shares_key`](crate::keyspace::shares_key)) scored by its lease deadline on the
//! Redis server's clock, so a holder that dies gives its permit back when its lease ends,
//! whatever the clients' clocks say. While permits are held, the lock key holds a marker
//! ([`SHARES_MARKER`](crate::keyspace::SHARES_MARKER)) naming the number of permits, until the
//! latest deadline of the live permits; a plain [`LockManager::acquire`] of the same key and a
//! handle with another number of permits are refused. A permit counts only under that marker:
//! once it is gone (an operator's `DEL`, an eviction), the permits under it are lost. Waiters
//! queue in the key's fair queue: a release hands its permit to the first live waiter in the
//! same script call, with one push to wake it.

use crate::backend::shares::Holders;
use crate::error::LockError;
use crate::guard::LockGuard;
use crate::manager::LockManager;
use crate::options::LockOptions;
use crate::protocol::value::Share;
use crate::util::escape::Escaped;

/// A semaphore of `permits` leased permits on one key: at most `permits` holders at once across
/// all clients. A cheap handle (`Clone`); made by [`LockManager::semaphore`].
///
/// Each permit is a [`LockGuard`] with its own lease: TTL, watchdog, [`lost`](LockGuard::lost),
/// [`extend`](LockGuard::extend), [`release`](LockGuard::release), and a
/// [fencing token](LockGuard::fencing_token) per grant, strictly increasing per key (minted from
/// the manager's fencing counter), so a resource can refuse a holder that was paused past its
/// lease. A holder that dies (SIGKILL, a partition) returns its permit when its lease ends: no
/// permit ever leaks.
///
/// Waiters queue in arrival order; a release hands its permit straight to the first live
/// waiter and wakes it with one push, and a waiter that died while queued is skipped. Acquire
/// and release are one round trip each and O(log N) work in Redis for N permits held.
///
/// ```no_run
/// # async fn demo(locks: lockcore::LockManager) -> Result<(), lockcore::LockError> {
/// use std::time::Duration;
/// use lockcore::LockOptions;
///
/// let card_processor = locks.semaphore("card-processor", 5);
/// let opts = LockOptions::new(Duration::from_secs(10)).wait(Duration::from_secs(2));
/// let permit = card_processor.acquire(&opts).await?;
/// // ... at most 5 of these run at once, across every instance ...
/// permit.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Semaphore {
    manager: LockManager,
    key: String,
    permits: u32,
}

impl LockManager {
    /// A semaphore of `permits` permits on `key` (the manager's prefix is put in front). No
    /// network call: the handle is checked and used by its methods.
    ///
    /// Every caller of one key must agree on `permits`: a handle whose number differs from the
    /// one the key is held with gets [`LockError::InvalidOptions`] naming both numbers, and so
    /// does a plain lock of the key while permits are held. Not available under Redlock (see
    /// [`Semaphore::acquire`]).
    pub fn semaphore(&self, key: &str, permits: u32) -> Semaphore {
        Semaphore {
            manager: self.clone(),
            key: key.to_owned(),
            permits,
        }
    }
}

impl Semaphore {
    /// The key as given (without the prefix).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The number of permits.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// Acquires one permit, waiting (in the fair queue) until `opts`' wait budget is spent. The
    /// permit's lease lasts `opts`' TTL from the successful attempt, renewed by the watchdog
    /// when `opts` turns it on.
    ///
    /// # Errors
    /// - [`LockError::InvalidKey`], [`LockError::InvalidOptions`] as for
    ///   [`LockManager::acquire`]; [`LockError::InvalidOptions`] also for 0 permits, under
    ///   Redlock (a permit count needs one place that counts every holder, which independent
    ///   masters are not), and when the key is held as a semaphore of another number of
    ///   permits or by a read-write lock's readers (the error names both).
    /// - [`LockError::Contended`] when every permit stayed taken for the whole wait budget.
    /// - [`LockError::Redis`], [`LockError::NotALock`] as for [`LockManager::acquire`].
    pub async fn acquire(&self, opts: &LockOptions) -> Result<LockGuard, LockError> {
        let key = self.checked(opts)?;
        self.manager
            .acquire_checked_as(key, opts, Some(Share::Permits(self.permits)))
            .await
    }

    /// Makes exactly one attempt to take a permit; never queues. `Ok(None)` when every permit
    /// is taken, or a live waiter is queued ahead.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire), except that it never returns [`LockError::Contended`].
    pub async fn try_acquire(&self, opts: &LockOptions) -> Result<Option<LockGuard>, LockError> {
        self.checked(opts)?;
        self.manager
            .try_acquire_as(&self.key, opts, Some(Share::Permits(self.permits)))
            .await
    }

    /// How many permits are free now (permits minus the live leases; 0 while a plain lock
    /// holds the key, or while shares whose marker is gone keep it until they end). A snapshot:
    /// another client may take one at once.
    ///
    /// # Errors
    /// [`LockError::InvalidOptions`] as for [`acquire`](Self::acquire) (0 permits, Redlock,
    /// another number of permits); [`LockError::Redis`]; [`LockError::NotALock`].
    pub async fn available(&self) -> Result<u32, LockError> {
        let key = self.checked(&LockOptions::default())?;
        let share = Share::Permits(self.permits);
        match self.manager.shared().backend.holders(&key).await? {
            Holders::Free => Ok(self.permits),
            Holders::Exclusive | Holders::Orphaned { .. } => Ok(0),
            Holders::Shares { share: held, count } if held == share => {
                let count = u32::try_from(count).unwrap_or(u32::MAX);
                Ok(self.permits.saturating_sub(count))
            }
            Holders::Shares { share: held, .. } => Err(LockError::InvalidOptions {
                reason: format!(
                    "`{}` is held as {}, but this handle is {}; expected every caller of one key to use the same number of permits",
                    Escaped(&key),
                    held.describe(),
                    share.describe()
                ),
            }),
        }
    }

    /// The full key, after the checks every call makes before any network call.
    fn checked(&self, opts: &LockOptions) -> Result<String, LockError> {
        if self.permits == 0 {
            return Err(LockError::InvalidOptions {
                reason: format!(
                    "the semaphore `{}` has 0 permits; expected at least 1",
                    Escaped(&self.key)
                ),
            });
        }
        let key = self.manager.checked_key(&self.key, opts)?;
        self.manager
            .shared()
            .backend
            .check_shares(&key, "a semaphore")?;
        opts.refuse_hold_for_share(&key, "a semaphore")?;
        Ok(key)
    }
}
