//! Idempotency keys (cargo feature `idempotency`): a retried request returns the first result
//! instead of running again. [`LockManager::idempotent`] and `#[lockcore::idempotent]`.
//!
//! # Records
//! - The record of key `k` is `<prefix>__idem__{<tag>}rec:k`; the lock that serialises its
//!   first run is `<prefix>__idem__{<tag>}lock:k`, where `<tag>` is a short hash tag derived
//!   from `k` ([`keyspace::idempotency_keys`](crate::keyspace::idempotency_keys)), so both share a
//!   Redis Cluster slot. No lock key can start with `__idem__` ([`LockError::InvalidKey`]), so
//!   a record never collides with, or blocks, a lock on the same rendered key.
//! - A record is written once, after the body returned `Ok` and before the lock is released,
//!   by one script that sets it (`SET .. PX record_ttl`) only while the lock key still holds
//!   this call's lock value: a call whose lease ended (its watchdog could not renew, say) never
//!   overwrites the record of the duplicate that took the lock after it, and fails with
//!   [`LockError::Lost`] instead of answering its own value. There is no half-written record.
//!   It is a JSON object `{"v":1,"at_ms":..,"fingerprint":..,"value":..}` (`at_ms`: Unix time
//!   of the write).
//! - Under Redlock the record is written, by that script, to every node; it is stored when a
//!   quorum stored it, and read as the record a quorum of nodes hold (a write that reached
//!   fewer nodes answered nobody and is ignored; the next call runs the body).

mod store;

use std::future::Future;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::LockError;
use crate::manager::LockManager;
use crate::options::LockOptions;
use crate::protocol::keyspace::idempotency_keys;
use crate::util::escape::Escaped;
use store::Store;

/// What [`LockManager::idempotent`] keeps and how it waits.
///
/// ```
/// use std::time::Duration;
/// let idem = lockcore::Idempotency::new(Duration::from_secs(24 * 3600))
///     .lock_options(lockcore::LockOptions::new(Duration::from_secs(30)).wait(Duration::from_secs(10)))
///     .fingerprint("sha256-of-the-request-body");
/// # let _ = idem;
/// ```
#[derive(Debug, Clone)]
#[must_use]
#[cfg_attr(docsrs, doc(cfg(feature = "idempotency")))]
pub struct Idempotency {
    record_ttl: Duration,
    lock: Option<LockOptions>,
    fingerprint: Option<String>,
}

impl Idempotency {
    /// The largest stored value, serialized: 512 KiB. A larger `Ok` value is returned to the
    /// caller as [`LockError::BadIdempotencyRecord`] and nothing is stored.
    pub const MAX_RECORD_BYTES: usize = 512 * 1024;

    /// Keep each record for `record_ttl` (whole milliseconds, 1 ms ..= 7 days). The lock that
    /// serialises the first run uses the manager's default options with the watchdog on.
    pub fn new(record_ttl: Duration) -> Self {
        Idempotency {
            record_ttl,
            lock: None,
            fingerprint: None,
        }
    }

    /// The lock's options: its TTL, and the wait budget of a duplicate that arrives while the
    /// first call runs (it waits for the first call's release, then returns its record).
    pub fn lock_options(mut self, opts: LockOptions) -> Self {
        self.lock = Some(opts);
        self
    }

    /// A fingerprint of the request (e.g. a hash of its body). A later call with the same key
    /// and another fingerprint fails with [`LockError::IdempotencyMismatch`].
    pub fn fingerprint(mut self, fingerprint: impl Into<String>) -> Self {
        self.fingerprint = Some(fingerprint.into());
        self
    }
}

/// The largest record TTL: 7 days, as for a lock's TTL.
const MAX_RECORD_TTL: Duration = LockOptions::MAX_TTL;

#[cfg_attr(docsrs, doc(cfg(feature = "idempotency")))]
impl LockManager {
    /// Runs `body` once per idempotency `key`: the first call runs it under a lock and stores
    /// its `Ok` value for the record TTL; later calls with the same key return the stored value
    /// without running `body`. A call that arrives while the first still runs waits for it (the
    /// lock's own waiting, up to the lock options' wait budget) and returns its value. An `Err`
    /// is not stored: a retry runs `body` again. A holder that dies mid-body stores nothing; the
    /// next call runs `body` once the lock's TTL has passed.
    ///
    /// ```no_run
    /// # async fn demo(locks: lockcore::LockManager) -> Result<(), lockcore::LockError> {
    /// # async fn place_order(_: &str) -> Result<u64, lockcore::LockError> { Ok(7) }
    /// use std::time::Duration;
    /// let idem = lockcore::Idempotency::new(Duration::from_secs(24 * 3600));
    /// let order_id: u64 = locks
    ///     .idempotent("order:req:9f2c", &idem, || place_order("9f2c"))
    ///     .await?;
    /// # let _ = order_id; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// `body`'s own error, or a [`LockError`] converted into `E`:
    /// - [`LockError::InvalidKey`] / [`LockError::InvalidOptions`] before any network call;
    /// - [`LockError::Contended`] when the first call still runs after the wait budget;
    /// - [`LockError::IdempotencyMismatch`] when the record was stored with another fingerprint;
    /// - [`LockError::BadIdempotencyRecord`] when the record does not deserialize into `T`
    ///   (`body` is not run again), or the new value is too large
    ///   ([`Idempotency::MAX_RECORD_BYTES`]) or does not serialize (nothing is stored);
    /// - [`LockError::Lost`] (naming the lock key) when this call's lock ended before its
    ///   record was stored: its lease expired (e.g. the watchdog could not renew it in time) or
    ///   another holder has the lock. `body` ran, but its value is neither stored nor
    ///   returned, since a duplicate may have run `body` and stored its own value meanwhile: a
    ///   retry returns the stored value, or runs `body` again when none was stored;
    /// - [`LockError::Redis`] when Redis cannot be reached (Redlock:
    ///   [`LockError::QuorumUnreachable`] when too few nodes answer to tell whether a record
    ///   is stored).
    pub async fn idempotent<T, E, F, Fut>(
        &self,
        key: &str,
        idem: &Idempotency,
        body: F,
    ) -> Result<T, E>
    where
        T: Serialize + DeserializeOwned,
        E: From<LockError>,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        match self.idempotent_inner(key, idem, body).await {
            Ok(result) => result,
            Err(error) => Err(E::from(error)),
        }
    }

    pub(crate) async fn idempotent_inner<T, E, F, Fut>(
        &self,
        key: &str,
        idem: &Idempotency,
        body: F,
    ) -> Result<Result<T, E>, LockError>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        if idem.record_ttl < Duration::from_millis(1) || idem.record_ttl > MAX_RECORD_TTL {
            return Err(LockError::InvalidOptions {
                reason: format!(
                    "record ttl is {}; expected 1ms ..= {}",
                    crate::util::time::Shown(idem.record_ttl),
                    crate::util::time::Shown(MAX_RECORD_TTL)
                ),
            });
        }
        let opts = match &idem.lock {
            Some(opts) => opts.clone(),
            None => self.default_options().clone().watchdog(true),
        };
        // The key and options as for a lock (the record's lock key is derived from it).
        self.checked_key(key, &opts)?;
        let (record_key, lock_key) = idempotency_keys(self.key_prefix(), key);
        let store = Store::new(self.data_nodes());
        if let Some(value) = store.read(key, &record_key, idem).await? {
            return Ok(Ok(value));
        }
        let guard = self.acquire_checked(lock_key, &opts).await?;
        // The first call may have finished while this one waited.
        let stored = match store.read(key, &record_key, idem).await {
            Ok(Some(value)) => Some(Ok(value)),
            Ok(None) => None,
            Err(error) => Some(Err(error)),
        };
        let result = match stored {
            Some(stored) => stored.map(Ok),
            None => match body().await {
                Ok(value) => store
                    .write(key, &record_key, &guard, idem, &value)
                    .await
                    .map(|()| Ok(value)),
                Err(error) => Ok(Err(error)),
            },
        };
        let known_lost = matches!(result, Err(LockError::Lost { .. }));
        if let Err(error) = guard.release().await
            && !known_lost
        {
            tracing::warn!(key = %Escaped(key), %error, "could not release the idempotency lock");
        }
        result
    }
}

/// Not public API: the arguments of `#[idempotent]` that reach the runtime.
#[derive(Debug)]
pub struct Record {
    /// `ttl_ms`: how long the record is kept.
    pub ttl_ms: u64,
    /// `wait_ms`: a duplicate's wait budget; `None`: the manager's default wait.
    pub wait_ms: Option<u64>,
    /// `fingerprint`, rendered.
    pub fingerprint: Option<String>,
}

/// Not public API: what `#[idempotent]`'s expansion calls. The lock uses the manager's default
/// options with the watchdog on and the attribute's `wait_ms`.
///
/// # Errors
/// As [`LockManager::idempotent`]; the body's own result is the `Ok` value.
pub async fn entry<T, E, Fut>(
    manager: Result<LockManager, LockError>,
    key: String,
    record: Record,
    body: Fut,
) -> Result<Result<T, E>, LockError>
where
    T: Serialize + DeserializeOwned,
    Fut: Future<Output = Result<T, E>>,
{
    let manager = manager?;
    let mut opts = manager.default_options().clone().watchdog(true);
    if let Some(wait) = record.wait_ms {
        opts = opts.wait(Duration::from_millis(wait));
    }
    let mut idem = Idempotency::new(Duration::from_millis(record.ttl_ms)).lock_options(opts);
    idem.fingerprint = record.fingerprint;
    manager.idempotent_inner(&key, &idem, || body).await
}
