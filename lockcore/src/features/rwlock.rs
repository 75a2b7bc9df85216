//! [`RwLock`]: many readers or one writer on a key, served fairly.
//!
//! The write lock of a key is the plain lock of that key ([`LockManager::acquire`]). Each
//! reader holds a share of the key: a member of its share set scored by its lease deadline on
//! the Redis server's clock (see [`keyspace::shares_key`](crate::keyspace::shares_key)), while
//! the lock key holds a marker ([`SHARES_MARKER`](crate::keyspace::SHARES_MARKER)), so plain
//! locks and writers find the key held. Readers and writers wait in the key's one fair queue:
//! requests are served in arrival order, consecutive readers together.

use crate::error::LockError;
use crate::guard::LockGuard;
use crate::manager::LockManager;
use crate::options::LockOptions;
use crate::protocol::value::Share;

/// A read-write lock on one key: many readers or one writer. A cheap handle (`Clone`); made by
/// [`LockManager::rw_lock`].
///
/// - The write lock *is* the plain lock of the key: [`write`](Self::write) and
///   [`LockManager::acquire`] of the same key exclude each other, and readers exclude both.
/// - Fair: requests are served in arrival order, consecutive readers together. A reader that
///   arrives while a writer is queued waits behind it, so a writer is never starved by a stream
///   of readers. This needs the fair queue, which is the default: a writer with
///   [`LockOptions::handoff(false)`](crate::LockOptions::handoff) retries with backoff without
///   queueing, and a stream of readers can keep it out until its wait budget is spent
///   ([`LockError::Contended`](crate::LockError::Contended)).
/// - Each reader holds a lease of its own ([`LockGuard`]: TTL, watchdog, `lost()`, `extend`,
///   fencing token); a reader that dies frees its share when its lease ends. A read-unlock is
///   O(log N) in the N readers, never a scan of them.
///
/// ```no_run
/// # async fn demo(locks: lockcore::LockManager) -> Result<(), lockcore::LockError> {
/// use std::time::Duration;
/// use lockcore::LockOptions;
///
/// let prices = locks.rw_lock("price-list");
/// let opts = LockOptions::new(Duration::from_secs(10)).wait(Duration::from_secs(2));
/// let reading = prices.read(&opts).await?;
/// // ... many readers at once ...
/// reading.release().await?;
/// let writing = prices.write(&opts).await?;
/// // ... alone ...
/// writing.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RwLock {
    manager: LockManager,
    key: String,
}

impl LockManager {
    /// A read-write lock on `key` (the manager's prefix is put in front). No network call.
    /// Readers are not available under Redlock (see [`RwLock::read`]); the write lock is.
    pub fn rw_lock(&self, key: &str) -> RwLock {
        RwLock {
            manager: self.clone(),
            key: key.to_owned(),
        }
    }
}

impl RwLock {
    /// The key as given (without the prefix).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Acquires a read share, waiting (in the fair queue, behind any writer queued before it)
    /// until `opts`' wait budget is spent.
    ///
    /// # Errors
    /// As [`LockManager::acquire`], and [`LockError::InvalidOptions`] under Redlock (shares are
    /// counted in one place, which independent masters are not) or when the key is held as a
    /// semaphore.
    pub async fn read(&self, opts: &LockOptions) -> Result<LockGuard, LockError> {
        let key = self.checked(opts)?;
        self.manager
            .acquire_checked_as(key, opts, Some(Share::Read))
            .await
    }

    /// One attempt at a read share; never queues. `Ok(None)` when a writer holds the key or is
    /// queued (a live waiter is ahead).
    ///
    /// # Errors
    /// As [`read`](Self::read), except that it never returns [`LockError::Contended`].
    pub async fn try_read(&self, opts: &LockOptions) -> Result<Option<LockGuard>, LockError> {
        self.checked(opts)?;
        self.manager
            .try_acquire_as(&self.key, opts, Some(Share::Read))
            .await
    }

    /// Acquires the write lock: the plain lock of the key ([`LockManager::acquire`]), which
    /// waits for the readers that hold the key and for the requests queued before it.
    ///
    /// # Errors
    /// As [`LockManager::acquire`]: [`LockError::InvalidOptions`] when the key is held as a
    /// semaphore, which is never a read-write lock's key.
    pub async fn write(&self, opts: &LockOptions) -> Result<LockGuard, LockError> {
        self.manager.acquire(&self.key, opts).await
    }

    /// One attempt at the write lock ([`LockManager::try_acquire`]). `Ok(None)` when readers
    /// or a writer hold the key, or a live waiter is queued ahead.
    ///
    /// # Errors
    /// As [`LockManager::try_acquire`].
    pub async fn try_write(&self, opts: &LockOptions) -> Result<Option<LockGuard>, LockError> {
        self.manager.try_acquire(&self.key, opts).await
    }

    fn checked(&self, opts: &LockOptions) -> Result<String, LockError> {
        let key = self.manager.checked_key(&self.key, opts)?;
        self.manager
            .shared()
            .backend
            .check_shares(&key, "a read lock")?;
        opts.refuse_hold_for_share(&key, "a read lock")?;
        Ok(key)
    }
}
