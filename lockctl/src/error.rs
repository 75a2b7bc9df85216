//! [`CtlError`]: every way a `lockctl` command fails, each printed as one line.

/// A failed command. `Display` is the one line printed on stderr (after `lockctl: `).
#[derive(Debug, thiserror::Error)]
pub(crate) enum CtlError {
    /// The URL (or another argument) cannot be used.
    #[error("bad {what} `{value}`: {reason}")]
    BadInput {
        what: &'static str,
        value: String,
        reason: String,
    },
    /// The server could not be reached or refused to talk.
    #[error("cannot connect to {target}: {reason}")]
    Unreachable { target: String, reason: String },
    /// No key of that name.
    #[error("no such key `{key}`; expected a lock key as `lockctl list` prints it")]
    NoSuchKey { key: String },
    /// The key exists but is not a lock.
    #[error("`{key}` is {found}, not a lock; expected a string key holding a lock value")]
    NotALock { key: String, found: String },
    /// `release` without `--force`.
    #[error("refusing to release `{key}` without `--force`")]
    NotForced { key: String },
    /// The compare-and-delete found another value than the one read.
    #[error("`{key}` changed hands since it was read (or expired); nothing was released")]
    Changed { key: String },
    /// `release --token` names another holder.
    #[error("`{key}` is held by token {held}, not {expected}; nothing was released")]
    OtherHolder {
        key: String,
        held: String,
        expected: String,
    },
    /// `release` of a key that shares hold (a semaphore, readers) without `--token`.
    #[error(
        "`{key}` is held by shares (a semaphore's permits or readers); expected `--token` naming one share, as `lockctl inspect` lists them"
    )]
    SharesNeedToken { key: String },
    /// `release --token` names no live share of a key that shares hold.
    #[error(
        "`{key}` has no live share with token {token} (its lease ended, or it never held one); nothing was released"
    )]
    NoSuchShare { key: String, token: String },
    /// A command failed after connecting.
    #[error("redis error: {0}")]
    Redis(redis::RedisError),
    /// The library's release failed.
    #[error("{0}")]
    Lock(lockcore::LockError),
}

impl From<redis::RedisError> for CtlError {
    fn from(err: redis::RedisError) -> Self {
        CtlError::Redis(err)
    }
}

impl From<lockcore::LockError> for CtlError {
    fn from(err: lockcore::LockError) -> Self {
        match err {
            lockcore::LockError::Redis(err) => CtlError::Redis(err),
            other => CtlError::Lock(other),
        }
    }
}
