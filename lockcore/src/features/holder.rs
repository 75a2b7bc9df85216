//! [`Holder`]: who holds a lock key now, from the holder metadata of its value
//! ([`LockManager::holder`]).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::LockError;
use crate::manager::LockManager;
use crate::protocol::keyspace;
use crate::util::escape::Escaped;

/// Who holds a lock (or leads, for [`LockManager::campaign`]) now: the holder metadata its
/// lock value carries (see [`keyspace`](crate::keyspace) for the format), as `lockctl`
/// shows it.
///
/// The fields are public, and each has an accessor of the same name. A value written by
/// another client (a bare token, without metadata) reads as `host` empty, `pid` 0, `label`
/// `None` and `acquired_at` the Unix epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The holder's random token (the first word of the value).
    pub token: String,
    /// The host name of the holder's process.
    pub host: String,
    /// The holder's process id.
    pub pid: u32,
    /// The holder manager's label
    /// ([`LockManagerBuilder::process_label`](crate::LockManagerBuilder::process_label)), if set.
    pub label: Option<String>,
    /// When the lock was taken (ms precision): the client's wall clock for a free key taken at
    /// once, the Redis server's clock when it was handed over by a release (the usual case for a
    /// leader elected after another resigned) or taken with a minimum hold.
    pub acquired_at: SystemTime,
    /// The `#[distributed_lock]` key template, when the lock came through the attribute.
    pub key_template: Option<String>,
    /// The key's remaining TTL when it was read (`None`: no expiry).
    pub expires_in: Option<Duration>,
}

impl Holder {
    /// The holder's token.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The holder's host name.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The holder's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The holder manager's label, if set.
    pub fn label(&self) -> Option<&str> {
        self.label.as_deref()
    }

    /// When the lock was taken.
    pub fn acquired_at(&self) -> SystemTime {
        self.acquired_at
    }

    /// When the lock was taken (the same as [`acquired_at`](Self::acquired_at)): for a
    /// leader, since when it leads.
    pub fn since(&self) -> SystemTime {
        self.acquired_at
    }

    /// The key's remaining TTL when it was read.
    pub fn expires_in(&self) -> Option<Duration> {
        self.expires_in
    }

    /// The holder described by a lock value, read with `expires_in` left.
    pub(crate) fn from_value(value: &str, expires_in: Option<Duration>) -> Holder {
        let (token, meta) = keyspace::split_value(value);
        let meta: serde_json::Value = meta
            .and_then(|json| serde_json::from_str(json).ok())
            .unwrap_or_default();
        let text = |name: &str| meta.get(name).and_then(|v| v.as_str()).map(str::to_owned);
        let number = |name: &str| meta.get(name).and_then(serde_json::Value::as_u64);
        Holder {
            token: token.to_owned(),
            host: text("host").unwrap_or_default(),
            pid: number("pid")
                .and_then(|pid| u32::try_from(pid).ok())
                .unwrap_or(0),
            label: text("label"),
            acquired_at: UNIX_EPOCH + Duration::from_millis(number("acquired_at").unwrap_or(0)),
            key_template: text("key_template"),
            expires_in,
        }
    }
}

impl LockManager {
    /// Who holds `key` (the manager's prefix is put in front) now, or `None` when it is free:
    /// the holder metadata of the key's value, read in one call that writes nothing. Under
    /// Redlock the key counts as held when a quorum of nodes holds one token. For a leadership
    /// key ([`campaign`](Self::campaign)) this is the leader.
    ///
    /// ```no_run
    /// # async fn demo(locks: lockcore::LockManager) -> Result<(), lockcore::LockError> {
    /// match locks.holder("leader:billing").await? {
    ///     Some(leader) => println!("led by {} pid {} since {:?}", leader.host, leader.pid, leader.acquired_at),
    ///     None => println!("no leader"),
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`LockError::InvalidKey`] for an empty key (before any network call);
    /// [`LockError::NotALock`] when the key holds another Redis type; [`LockError::InvalidOptions`]
    /// when it is held as shares ([`Semaphore`](crate::Semaphore) permits or
    /// [`RwLock`](crate::RwLock) readers: no one holder); [`LockError::Redis`], or
    /// under Redlock [`LockError::QuorumUnreachable`], when the read fails.
    pub async fn holder(&self, key: &str) -> Result<Option<Holder>, LockError> {
        let key = keyspace::full_key(self.key_prefix(), key)?;
        let held = self.shared().backend.read(&key).await?;
        if held
            .as_ref()
            .is_some_and(|held| keyspace::is_shares_marker(&held.value))
        {
            return Err(LockError::InvalidOptions {
                reason: format!(
                    "`{}` is held as shares (a semaphore's permits or a read-write lock's readers), which have no one holder; expected a plain lock or leadership key (see `Semaphore::available` or `lockctl inspect` for shares)",
                    Escaped(&key)
                ),
            });
        }
        Ok(held.map(|held| Holder::from_value(&held.value, held.expires_in)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::value::HolderStamp;

    #[test]
    fn metadata_is_read_back_and_a_bare_token_reads_empty() {
        let value = HolderStamp::new(Some("blue \"1\"")).mint(Some("leader:<name>"));
        let holder = Holder::from_value(value.as_str(), Some(Duration::from_millis(7)));
        assert_eq!(holder.token(), value.token());
        assert_eq!(holder.pid(), std::process::id());
        assert_eq!(holder.label(), Some("blue \"1\""));
        assert_eq!(holder.key_template.as_deref(), Some("leader:<name>"));
        assert!(!holder.host().is_empty());
        assert!(holder.since() > UNIX_EPOCH + Duration::from_secs(1_600_000_000));
        assert_eq!(holder.expires_in(), Some(Duration::from_millis(7)));
        let bare = Holder::from_value("tok", None);
        assert_eq!((bare.token(), bare.host(), bare.pid()), ("tok", "", 0));
        assert_eq!(bare.acquired_at(), UNIX_EPOCH);
    }
}
