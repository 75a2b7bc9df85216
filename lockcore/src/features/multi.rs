//! Several keys locked together: [`LockManager::acquire_many`] and its [`MultiGuard`].
//!
//! The keys are taken one after another in canonical order (sorted, duplicates removed), over
//! the ordinary per-key [`LockManager::acquire`]: two callers that lock the same set in any
//! order queue on the same first key, so they never deadlock. It is all or nothing: when a key
//! cannot be taken, the keys already taken are released before the error returns.
//!
//! On one node (a plain server or a Sentinel primary, or a cluster when every key and its
//! fencing counter and waiter queue share one slot) the call first tries to take every key in
//! one script (`ACQUIRE_ALL`): it succeeds only when no key is held and none has queued
//! waiters, so the fair queue is never jumped. When that script reports a key taken, nothing
//! was written and the ordered acquisition above runs unchanged. With `wait_for_replicas` the
//! one script call is followed by one `WAIT`, which covers all of its writes. Redlock always
//! takes the ordered path.

use futures_util::future::{join_all, select_all};
use tokio::time::Instant;

use crate::backend::single::BulkKey;
use crate::backend::waiting::{Progress, Won};
use crate::error::LockError;
use crate::guard::LockGuard;
use crate::lease::telemetry::AcquireProbe;
use crate::manager::LockManager;
use crate::options::LockOptions;
use crate::protocol::keyspace::full_key;
use crate::protocol::value::LockValue;

/// The locks on a set of keys, held together. Owned, `Send + Sync + 'static`.
///
/// Returned by [`LockManager::acquire_many`]. The guards are in canonical order (sorted by key,
/// no duplicates), each with its own token and [fencing token](LockGuard::fencing_token).
/// Dropped without [`release`](Self::release), every guard releases its key as
/// [`LockGuard`]'s `Drop` does: never blocking.
#[derive(Debug)]
#[must_use = "dropping the guard releases the locks at once"]
pub struct MultiGuard {
    guards: Vec<LockGuard>,
    /// The manager's key prefix, to find a guard by the caller's key.
    prefix: String,
}

impl MultiGuard {
    /// The set of one `guard` (a semaphore's permit or a reader's share, for the attribute).
    pub(crate) fn single(guard: LockGuard, prefix: &str) -> MultiGuard {
        MultiGuard {
            guards: vec![guard],
            prefix: prefix.to_owned(),
        }
    }

    /// The guards, one per key, sorted by key.
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// The guard of `key` (the caller's key, without the manager's prefix, or the full Redis
    /// key), if it is one of this guard's keys.
    pub fn get(&self, key: &str) -> Option<&LockGuard> {
        let full = format!("{}{key}", self.prefix);
        self.guards
            .iter()
            .find(|guard| guard.key() == full)
            .or_else(|| self.guards.iter().find(|guard| guard.key() == key))
    }

    /// The full Redis keys, prefix included, sorted.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.guards.iter().map(LockGuard::key)
    }

    /// The fencing token of each key, in the order of [`keys`](Self::keys).
    pub fn fencing_tokens(&self) -> Vec<u64> {
        self.guards.iter().map(LockGuard::fencing_token).collect()
    }

    /// The fencing token of `key` (as for [`get`](Self::get)).
    pub fn fencing_token(&self, key: &str) -> Option<u64> {
        self.get(key).map(LockGuard::fencing_token)
    }

    /// `true` while every lease is held (local state, no network call).
    pub fn is_held(&self) -> bool {
        self.guards.iter().all(LockGuard::is_held)
    }

    /// Completes when any of the locks is lost (see [`LockGuard::lost`]). Cancel-safe.
    pub async fn lost(&self) {
        if self.guards.is_empty() {
            return std::future::pending().await;
        }
        select_all(self.guards.iter().map(|guard| Box::pin(guard.lost()))).await;
    }

    /// The first key whose lease is no longer held, else the first key.
    pub(crate) fn lost_key(&self) -> String {
        let lost = self.guards.iter().find(|guard| !guard.is_held());
        lost.or(self.guards.first())
            .map(|guard| guard.key().to_owned())
            .unwrap_or_default()
    }

    /// Whether the watchdog renews the leases.
    pub(crate) fn is_watched(&self) -> bool {
        self.guards.iter().any(LockGuard::is_watched)
    }

    /// Releases every key at once (the compare-and-deletes are sent concurrently).
    ///
    /// # Errors
    /// The first error in key order: [`LockError::Lost`] for a key that had expired or holds
    /// another holder's token, [`LockError::Redis`] for a key whose release could not be sent
    /// (a background release is then spawned for it). Every key is released either way.
    pub async fn release(self) -> Result<(), LockError> {
        release_all(self.guards).await
    }
}

/// Releases `guards` concurrently; the first error in order.
async fn release_all(guards: Vec<LockGuard>) -> Result<(), LockError> {
    join_all(guards.into_iter().map(LockGuard::release))
        .await
        .into_iter()
        .collect()
}

/// `keys` sorted, without duplicates.
pub(crate) fn canonical<I>(keys: I) -> Vec<String>
where
    I: IntoIterator,
    I::Item: AsRef<str>,
{
    let mut keys: Vec<String> = keys.into_iter().map(|k| k.as_ref().to_owned()).collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

impl LockManager {
    /// The fast path of [`acquire_many`](Self::acquire_many): every key of `keys` (canonical,
    /// checked) in one script call on one node, when none is held and none has queued waiters.
    /// `Ok(None)` when that did not happen and nothing is held: Redlock, a cluster with the keys
    /// in several slots, or a key that is taken. Each guard gets its own token and fencing token,
    /// its validity from the start of the call, and its watchdog registration as after
    /// [`acquire`](Self::acquire).
    async fn acquire_all_at_once(
        &self,
        keys: &[String],
        opts: &LockOptions,
    ) -> Result<Option<Vec<LockGuard>>, LockError> {
        let prefix = self.key_prefix();
        let full = keys
            .iter()
            .map(|key| full_key(prefix, key))
            .collect::<Result<Vec<_>, _>>()?;
        let counters: Vec<String> = full.iter().map(|key| self.counter_key(key)).collect();
        let values: Vec<LockValue> = full.iter().map(|_| self.new_value(opts)).collect();
        let bulk: Vec<BulkKey<'_>> = full
            .iter()
            .zip(&counters)
            .zip(&values)
            .map(|((key, counter_key), value)| BulkKey {
                key,
                counter_key,
                value,
            })
            .collect();
        let ttl = opts.ttl();
        if opts.hold_at_least_value().is_some() {
            // The one-call script does not stamp the server's time that a minimum hold is
            // measured from: the keys are taken one by one instead.
            return Ok(None);
        }
        let call = self.shared().backend.start_call()?;
        let attempt_start = Instant::now();
        let Some(fencing_tokens) = self.shared().backend.attempt_all(&bulk, ttl).await? else {
            return Ok(None);
        };
        let guards = full
            .into_iter()
            .zip(values)
            .zip(fencing_tokens)
            .map(|((key, value), fencing_token)| {
                let probe = AcquireProbe::start("", &key, opts.key_template_value());
                probe.attempt();
                let won = Won {
                    value,
                    fencing_token,
                    attempt_start,
                    claim: None,
                };
                let guard = self.new_guard(key, won, opts);
                probe.finish(Ok(Some(fencing_token)));
                guard
            })
            .collect();
        Ok(Some(self.admit(guards, call).await?))
    }

    /// Acquires the locks on every key of `keys` (the manager's prefix is put in front of each),
    /// all or nothing, within one wait budget.
    ///
    /// The keys are sorted and deduplicated. On one node, when none is held or queued for, all
    /// are taken in one script call (skipped under Redlock and on a cluster with the keys in
    /// several slots; with `wait_for_replicas` it is followed by one `WAIT`). Otherwise they
    /// are acquired one by one with [`acquire`](Self::acquire), each with what is left of
    /// `opts`' wait budget (measured from this call). Because every caller takes a set in the
    /// same order, two calls locking `["acct:1", "acct:2"]` and `["acct:2", "acct:1"]` never
    /// deadlock. On a failure the keys already taken are released before the error returns.
    ///
    /// ```no_run
    /// # async fn demo(locks: lockcore::LockManager) -> Result<(), lockcore::LockError> {
    /// use std::time::Duration;
    /// let opts = lockcore::LockOptions::new(Duration::from_secs(5)).wait(Duration::from_secs(1));
    /// let both = locks.acquire_many(["acct:7", "acct:3"], &opts).await?;
    /// assert_eq!(both.keys().collect::<Vec<_>>(), ["lock:acct:3", "lock:acct:7"]);
    /// // ... move money from one account to the other ...
    /// both.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// - [`LockError::InvalidKey`] when `keys` is empty or any key is invalid, and
    ///   [`LockError::InvalidOptions`] for out-of-range options: both before any network call.
    /// - [`LockError::Contended`] naming the key that another holder kept until the shared wait
    ///   budget was spent; `waited` counts from this call.
    /// - [`LockError::Lost`] naming a key taken early whose lease ended before the last key was
    ///   taken (the others are released first): the set was never held as a whole.
    /// - Any other error of [`acquire`](Self::acquire) for the key that failed.
    pub async fn acquire_many<I>(
        &self,
        keys: I,
        opts: &LockOptions,
    ) -> Result<MultiGuard, LockError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        self.ensure_open()?;
        let keys = canonical(keys);
        if keys.is_empty() {
            return Err(LockError::InvalidKey {
                reason: "the key set is empty; expected at least one key".to_owned(),
            });
        }
        for key in &keys {
            full_key(self.key_prefix(), key)?;
        }
        opts.validate()?;
        let started = Instant::now();
        if let Some(guards) = self.acquire_all_at_once(&keys, opts).await? {
            return Ok(MultiGuard {
                guards,
                prefix: self.key_prefix().to_owned(),
            });
        }
        let mut guards = Vec::with_capacity(keys.len());
        for key in &keys {
            let remaining = opts.wait_budget().saturating_sub(started.elapsed());
            let attempt = self.acquire(key, &opts.clone().wait(remaining)).await;
            match attempt {
                Ok(guard) => guards.push(guard),
                Err(error) => {
                    if let Err(release) = release_all(guards).await {
                        tracing::debug!(error = %release, "releasing the keys taken before a failed acquire_many");
                    }
                    return Err(match error {
                        LockError::Contended { key, .. } => LockError::Contended {
                            key,
                            waited: started.elapsed(),
                        },
                        other => other,
                    });
                }
            }
        }
        // A key taken early may have expired while a later one was waited for (watchdog off,
        // a wait budget near the ttl): then the set is not held, and nobody may act on it.
        if let Some(expired) = guards.iter().find(|guard| !guard.is_held()) {
            let key = expired.key().to_owned();
            if let Err(release) = release_all(guards).await {
                tracing::debug!(error = %release, "releasing a key set that expired while it was being taken");
            }
            return Err(LockError::Lost { key });
        }
        Ok(MultiGuard {
            guards,
            prefix: self.key_prefix().to_owned(),
        })
    }
}
