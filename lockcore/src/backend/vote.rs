//! [`Vote`] and [`Released`]: the outcomes of an acquire round and of a release, on one node
//! or a Redlock quorum.

use std::time::Duration;

use redis::Value;

use crate::error::LockError;
use crate::protocol::value::Share;
use crate::util::escape::Escaped;

/// The outcome of one acquire round.
#[derive(Debug)]
pub(crate) enum Vote {
    /// The key was set (on a quorum, for Redlock); the fencing token the round minted, and the
    /// value Redis stored when it is not the one sent (a re-check stamps `acquired_at` with the
    /// time it took the key).
    Won {
        fencing_token: u64,
        stored: Option<String>,
    },
    /// Not won; the smallest remaining TTL a holder reported, if any.
    Lost { holder_ttl: Option<Duration> },
}

/// A reply that is not one of the acquire scripts'.
fn unexpected(reply: &Value) -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::Client,
        "unexpected reply of a lockcore acquire script",
        format!("{reply:?}"),
    ))
}

/// Element `value` of `reply`, converted.
fn element<T: redis::FromRedisValue>(value: &Value, reply: &Value) -> Result<T, LockError> {
    redis::from_redis_value_ref(value).map_err(|_| unexpected(reply).into())
}

impl Vote {
    /// The vote for one node's acquire-script reply on `key`: `{1, fencing_token[, stored]}`,
    /// `{0, pttl_ms}` or `{-1, type}`. A pttl of 0 (free, but a queued waiter has the turn) or
    /// -1 (no expiry) reports no TTL. The fencing token may come as an integer or, above 2^53
    /// (where the script reads the counter back as a string), as a decimal string.
    ///
    /// # Errors
    /// - [`LockError::NotALock`] for `{-1, type}`: the key holds another Redis type.
    /// - [`LockError::Redis`] for a reply of another shape, or a won reply whose fencing token
    ///   is not positive: the counter was overwritten (only `INCR` from 0 up is ours), so the
    ///   token would not fence anything. The caller releases the key as after any failed
    ///   acquire. Without fencing (`fenced` false, `FencingCounter::Off`) a win carries token 0.
    pub(crate) fn from_reply(reply: Value, fenced: bool, key: &str) -> Result<Vote, LockError> {
        let Value::Array(items) = &reply else {
            return Err(unexpected(&reply).into());
        };
        let (Some(Value::Int(kind)), Some(second)) = (items.first(), items.get(1)) else {
            return Err(unexpected(&reply).into());
        };
        match kind {
            1 => {
                let fencing_token: i64 = element(second, &reply)?;
                let stored = match items.get(2) {
                    None => None,
                    Some(value) => Some(element::<String>(value, &reply)?),
                };
                match u64::try_from(fencing_token) {
                    Ok(fencing_token) if fencing_token > 0 || !fenced => Ok(Vote::Won {
                        fencing_token,
                        stored,
                    }),
                    _ => Err(redis::RedisError::from((
                        redis::ErrorKind::Client,
                        "the fencing counter holds a value lockcore did not mint",
                        format!(
                            "INCR returned {fencing_token}; expected a positive count (delete the counter key only if no resource has stored a fence yet)"
                        ),
                    ))
                    .into()),
                }
            }
            0 => {
                let pttl: i64 = element(second, &reply)?;
                Ok(Vote::Lost {
                    holder_ttl: u64::try_from(pttl)
                        .ok()
                        .filter(|ms| *ms > 0)
                        .map(Duration::from_millis),
                })
            }
            -1 => {
                let found: String = element(second, &reply)?;
                Err(LockError::NotALock {
                    key: key.to_owned(),
                    found,
                })
            }
            _ => Err(unexpected(&reply).into()),
        }
    }
}

/// The outcome of a compare-and-delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Released {
    /// The key held the token and was deleted (Redlock: on a quorum).
    Deleted,
    /// The key was missing: it expired, was deleted, or (a re-sent command) this release ran
    /// already.
    Missing,
    /// The key holds another holder's token or another type; it was left alone. Redlock: the
    /// token was on fewer than a quorum of nodes.
    HeldByOther,
    /// Redlock: deleted on `confirmed` nodes, fewer than the quorum of `needed`, and enough
    /// nodes did not answer within the node timeout that the token may have been on a quorum.
    Unconfirmed { confirmed: usize, needed: usize },
}

/// `Err(InvalidOptions)` when `reply` is the acquire script's `{-2, kind}`: the key holds
/// shares of another kind than `share`, or (`share` `None`, a plain lock) a semaphore's
/// permits, which a plain lock is never granted.
pub(crate) fn check_kind(reply: &Value, key: &str, share: Option<Share>) -> Result<(), LockError> {
    let Value::Array(items) = reply else {
        return Ok(());
    };
    let (Some(Value::Int(-2)), Some(found)) = (items.first(), items.get(1)) else {
        return Ok(());
    };
    let found: String = redis::from_redis_value_ref(found).unwrap_or_default();
    Err(mismatch(key, share, &found))
}

/// The error of a handle of `share`'s kind (`None`: a plain lock) on a key that holds shares of
/// kind `found` (as the marker names it).
fn mismatch(key: &str, share: Option<Share>, found: &str) -> LockError {
    let found = Share::from_kind(found)
        .map_or_else(|| format!("shares of kind `{found}`"), Share::describe);
    let reason = match share {
        Some(share) => format!(
            "`{}` is held as {found}, but this handle is {}; expected every caller of one key to use the same kind (the same number of permits)",
            Escaped(key),
            share.describe()
        ),
        None => format!(
            "`{}` is held as {found}, but this is a plain lock (or a write lock), which a semaphore's key never grants; expected the semaphore's handle (`LockManager::semaphore`) for this key, or another key for the lock",
            Escaped(key)
        ),
    };
    LockError::InvalidOptions { reason }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(items: Vec<Value>) -> Value {
        Value::Array(items)
    }

    #[test]
    fn tokens_parse_as_integers_or_decimal_strings() {
        let big = reply(vec![
            Value::Int(1),
            Value::BulkString(b"9007199254740993".to_vec()),
        ]);
        match Vote::from_reply(big, true, "k") {
            Ok(Vote::Won {
                fencing_token,
                stored: None,
            }) => assert_eq!(fencing_token, 9_007_199_254_740_993),
            other => panic!("{other:?}"),
        }
        let stamped = reply(vec![
            Value::Int(1),
            Value::Int(7),
            Value::BulkString(b"t {}".to_vec()),
        ]);
        assert!(matches!(
            Vote::from_reply(stamped, true, "k"),
            Ok(Vote::Won { fencing_token: 7, stored: Some(s) }) if s == "t {}"
        ));
    }

    #[test]
    fn another_type_is_not_a_lock_and_odd_replies_are_errors() {
        let list = reply(vec![Value::Int(-1), Value::SimpleString("list".into())]);
        assert!(matches!(
            Vote::from_reply(list, true, "lock:k"),
            Err(LockError::NotALock { key, found }) if key == "lock:k" && found == "list"
        ));
        for odd in [
            Value::Nil,
            reply(vec![]),
            reply(vec![Value::Int(1)]),
            reply(vec![Value::Int(2), Value::Int(0)]),
            reply(vec![Value::Int(1), Value::BulkString(b"x".to_vec())]),
            reply(vec![Value::Int(1), Value::Int(0)]),
        ] {
            assert!(
                matches!(
                    Vote::from_reply(odd.clone(), true, "k"),
                    Err(LockError::Redis(_))
                ),
                "{odd:?}"
            );
        }
    }

    #[test]
    fn another_kind_is_invalid_options_naming_both_also_for_a_plain_lock() {
        let semaphore = reply(vec![
            Value::Int(-2),
            Value::BulkString(b"\"permits\":3".to_vec()),
        ]);
        for share in [Some(Share::Permits(5)), Some(Share::Read), None] {
            let err = check_kind(&semaphore, "lock:k", share).unwrap_err();
            let LockError::InvalidOptions { reason } = &err else {
                panic!("{err:?}")
            };
            assert!(
                reason.contains("`lock:k` is held as a semaphore of 3 permits"),
                "{reason}"
            );
        }
        let won = reply(vec![Value::Int(1), Value::Int(7)]);
        assert!(check_kind(&won, "lock:k", None).is_ok());
    }
}
