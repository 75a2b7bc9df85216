//! One key as Redis holds it, read in one pipeline: a [`LockRecord`] when it is a string, an
//! [`OtherKey`] (not a lock) when it holds another Redis type.

use std::collections::HashMap;

use serde::Serialize;

use crate::conn::Target;
use crate::error::CtlError;

/// Who holds (or waits for) a lock, decoded from a lock value (see `lockcore::keyspace`).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub(crate) struct Holder {
    /// The random token at the start of the value (bytes that are not UTF-8 replaced by
    /// U+FFFD: JSON strings are UTF-8).
    pub(crate) token: String,
    /// The token's bytes as stored.
    #[serde(skip)]
    pub(crate) token_bytes: Vec<u8>,
    pub(crate) host: Option<String>,
    pub(crate) pid: Option<u64>,
    pub(crate) label: Option<String>,
    /// Wall clock, ms since the Unix epoch.
    pub(crate) acquired_at: Option<u64>,
    pub(crate) key_template: Option<String>,
}

impl Holder {
    /// Decodes a value (any bytes: it may have been written by something else). A bare token
    /// (older versions) or metadata that does not parse gives a holder with the token only.
    pub(crate) fn parse(value: &[u8]) -> Holder {
        // As `lockcore::keyspace::split_value`, over bytes.
        let (token, meta) = match value.iter().position(|&b| b == b' ') {
            Some(space) => (&value[..space], Some(&value[space + 1..])),
            None => (value, None),
        };
        let meta: serde_json::Map<String, serde_json::Value> = meta
            .and_then(|m| serde_json::from_slice(m).ok())
            .unwrap_or_default();
        let text = |name: &str| meta.get(name).and_then(|v| v.as_str()).map(str::to_owned);
        let number = |name: &str| meta.get(name).and_then(serde_json::Value::as_u64);
        Holder {
            token: String::from_utf8_lossy(token).into_owned(),
            token_bytes: token.to_vec(),
            host: text("host"),
            pid: number("pid"),
            label: text("label"),
            acquired_at: number("acquired_at"),
            key_template: text("key_template"),
        }
    }
}

/// One lock.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct LockRecord {
    /// Always `"lock"` (idempotency records say `"idempotency"`, other keys `"not_a_lock"`).
    pub(crate) kind: &'static str,
    /// The full Redis key (bytes that are not UTF-8 replaced by U+FFFD).
    pub(crate) key: String,
    /// The key's bytes as stored.
    #[serde(skip)]
    pub(crate) key_bytes: Vec<u8>,
    /// Remaining TTL in ms; -1 when the key has no expiry.
    pub(crate) pttl_ms: i64,
    #[serde(flatten)]
    pub(crate) holder: Holder,
    /// The same holder fields again, as one object, for scripts that want them together.
    #[serde(rename = "holder")]
    pub(crate) holder_object: Holder,
    /// How long ago `acquired_at` was, on this machine's clock.
    pub(crate) held_ms: Option<u64>,
    /// Not stored in Redis (it is returned to the holder only): always `null` for now.
    pub(crate) fencing_token: Option<u64>,
    /// The live waiters of the hand-off queue, first in line first.
    pub(crate) waiters: Vec<Holder>,
    /// When the key holds lockcore's marker of shares (a semaphore's permits, a read-write
    /// lock's readers): what they are and who holds them. Left out for a plain lock.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) shares: Option<Box<Shares>>,
}

/// The shares that hold a key: a semaphore's permits or a read-write lock's readers.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct Shares {
    /// `"semaphore"` or `"read"`.
    pub(crate) mode: &'static str,
    /// A semaphore's number of permits; `null` for readers.
    pub(crate) permits: Option<u64>,
    /// How many shares are live.
    pub(crate) used: usize,
    /// The live shares, the one whose lease ends first first.
    pub(crate) holders: Vec<ShareHolder>,
}

/// One live share: its token (for `release --force --token`) and its remaining lease.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct ShareHolder {
    pub(crate) token: String,
    /// Until its lease ends, by the server's clock.
    pub(crate) remaining_ms: u64,
}

impl Shares {
    /// The shares of a key whose value is `value`, from its share set's members and scores
    /// (lease deadlines, ms since the Unix epoch by the server's clock); `None` unless `value`
    /// is the marker.
    fn of(value: &[u8], members: Vec<(Vec<u8>, f64)>, server_now_ms: u64) -> Option<Shares> {
        let text = std::str::from_utf8(value).ok()?;
        if !lockcore::keyspace::is_shares_marker(text) {
            return None;
        }
        let meta: serde_json::Value =
            serde_json::from_str(lockcore::keyspace::split_value(text).1.unwrap_or("{}")).ok()?;
        let permits = meta.get("permits").and_then(serde_json::Value::as_u64);
        let now = server_now_ms as f64;
        let holders: Vec<ShareHolder> = members
            .into_iter()
            .filter(|(_, deadline)| *deadline > now)
            .map(|(token, deadline)| ShareHolder {
                token: String::from_utf8_lossy(&token).into_owned(),
                remaining_ms: (deadline - now) as u64,
            })
            .collect();
        Some(Shares {
            mode: if permits.is_some() {
                "semaphore"
            } else {
                "read"
            },
            permits,
            used: holders.len(),
            holders,
        })
    }
}

/// A key matched under the prefix that holds another Redis type than a string (a list, a
/// hash, ...): no lockcore lock, shown so that an operator sees what else lives there.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct OtherKey {
    /// Always `"not_a_lock"`.
    pub(crate) kind: &'static str,
    /// The full Redis key (bytes that are not UTF-8 replaced by U+FFFD).
    pub(crate) key: String,
    /// The key's bytes as stored.
    #[serde(skip)]
    pub(crate) key_bytes: Vec<u8>,
    /// What `TYPE` says: `list`, `hash`, `set`, `zset`, `stream`, ...
    #[serde(rename = "type")]
    pub(crate) redis_type: String,
    /// Remaining TTL in ms; -1 when the key has no expiry.
    pub(crate) pttl_ms: i64,
    /// Always `null`: nobody holds it.
    pub(crate) holder: Option<Holder>,
    /// Always empty.
    pub(crate) waiters: Vec<Holder>,
}

/// What a key turned out to be.
#[derive(Debug, Clone)]
pub(crate) enum Found {
    Lock(LockRecord),
    NotALock(OtherKey),
}

/// One key as `lockcore::admin::READ_KEY_SCRIPT` saw it.
pub(crate) struct RawKey {
    /// `TYPE`: `none` when the key is gone.
    pub(crate) redis_type: String,
    /// The value of a string key.
    pub(crate) value: Option<Vec<u8>>,
    pub(crate) pttl_ms: i64,
    /// The node's clock, ms since the Unix epoch.
    pub(crate) server_now_ms: u64,
}

/// The library's key read as a pipeline command.
fn read_key_cmd(pipe: &mut redis::Pipeline, key: &[u8]) {
    pipe.cmd("EVAL")
        .arg(lockcore::admin::READ_KEY_SCRIPT)
        .arg(1)
        .arg(key);
}

/// Decodes the reply of [`read_key_cmd`].
fn decode_raw(value: redis::Value) -> Result<RawKey, CtlError> {
    let (redis_type, value, pttl_ms, secs, micros): (String, Option<Vec<u8>>, i64, u64, u64) =
        decode(value)?;
    Ok(RawKey {
        redis_type,
        value,
        pttl_ms,
        server_now_ms: secs.saturating_mul(1000) + micros / 1000,
    })
}

/// Reads one key, whatever its type, in one round trip.
pub(crate) async fn read_raw(target: &mut Target, key: &[u8]) -> Result<RawKey, CtlError> {
    let mut pipe = redis::pipe();
    read_key_cmd(&mut pipe, key);
    let replies: Vec<redis::Value> = pipe.query_async(target).await?;
    decode_raw(replies.into_iter().next().unwrap_or(redis::Value::Nil))
}

/// Reads `key`: a lock when it holds a string, an [`OtherKey`] for another type, `None` when
/// it vanished (released or expired) meanwhile.
pub(crate) async fn read(
    target: &mut Target,
    prefix: &str,
    key: &[u8],
) -> Result<Option<Found>, CtlError> {
    // A key that is not UTF-8 is no lockcore lock: it has no waiter queue.
    let queues = std::str::from_utf8(key).ok().map(|key| {
        let (queue, entries) = lockcore::keyspace::waiter_queue_keys(prefix, key);
        (queue, entries, lockcore::keyspace::shares_key(prefix, key))
    });
    // All keys share the lock key's slot, so one pipeline serves a cluster too.
    let mut pipe = redis::pipe();
    read_key_cmd(&mut pipe, key);
    if let Some((queue, entries, shares)) = &queues {
        pipe.lrange(queue, 0, -1)
            .hgetall(entries)
            .zrange_withscores(shares, 0, -1);
    }
    let replies: Vec<redis::Value> = pipe.query_async(target).await?;
    let mut replies = replies.into_iter();
    let mut next = || replies.next().unwrap_or(redis::Value::Nil);
    let raw = decode_raw(next())?;
    let queued: Vec<Vec<u8>> = decode(next())?;
    let entries: HashMap<Vec<u8>, String> = decode(next())?;
    let members: Vec<(Vec<u8>, f64)> = decode(next())?;
    let shown_key = String::from_utf8_lossy(key).into_owned();
    let value = match (raw.redis_type.as_str(), raw.value) {
        ("none", _) | ("string", None) => return Ok(None),
        ("string", Some(value)) => value,
        (_, _) => {
            return Ok(Some(Found::NotALock(OtherKey {
                kind: "not_a_lock",
                key: shown_key,
                key_bytes: key.to_vec(),
                redis_type: raw.redis_type,
                pttl_ms: raw.pttl_ms,
                holder: None,
                waiters: Vec::new(),
            })));
        }
    };
    let holder = Holder::parse(&value);
    let shares = Shares::of(&value, members, raw.server_now_ms).map(Box::new);
    // A queued waiter is live while its entry's deadline (the server's clock) is ahead.
    let waiters = queued
        .iter()
        .filter(|waiter| {
            let token = waiter.split(|&b| b == b' ').next().unwrap_or_default();
            entries
                .get(token)
                .and_then(|entry| lockcore::keyspace::entry_deadline_ms(entry))
                .is_some_and(|deadline| deadline > raw.server_now_ms)
        })
        .map(|waiter| Holder::parse(waiter))
        .collect();
    let held_ms = holder.acquired_at.map(|at| now_ms().saturating_sub(at));
    Ok(Some(Found::Lock(LockRecord {
        kind: "lock",
        key: shown_key,
        key_bytes: key.to_vec(),
        pttl_ms: raw.pttl_ms,
        holder_object: holder.clone(),
        holder,
        held_ms,
        fencing_token: None,
        waiters,
        shares,
    })))
}

/// One pipeline reply as `T`.
fn decode<T: redis::FromRedisValue>(value: redis::Value) -> Result<T, CtlError> {
    redis::from_redis_value(value).map_err(|e| CtlError::Redis(e.into()))
}

/// One key, checked: a lock or a key of another type; an error names the key when it is
/// missing or one of the library's auxiliary keys.
pub(crate) async fn inspect(
    target: &mut Target,
    prefix: &str,
    key: &str,
) -> Result<Found, CtlError> {
    if lockcore::keyspace::is_auxiliary_key(prefix, key) {
        check_is_lock(target, prefix, key).await?;
    }
    read(target, prefix, key.as_bytes())
        .await?
        .ok_or_else(|| CtlError::NoSuchKey {
            key: key.to_owned(),
        })
}

/// `TYPE key` is `string` and the name is not one of the library's auxiliary keys.
pub(crate) async fn check_is_lock(
    target: &mut Target,
    prefix: &str,
    key: &str,
) -> Result<(), CtlError> {
    let kind: String = redis::cmd("TYPE").arg(key).query_async(target).await?;
    match kind.as_str() {
        "none" => Err(CtlError::NoSuchKey {
            key: key.to_owned(),
        }),
        _ if lockcore::keyspace::is_auxiliary_key(prefix, key) => Err(CtlError::NotALock {
            key: key.to_owned(),
            found: format!(
                "an auxiliary key of lockcore (a {kind}: fencing counter, waiter queue or idempotency record)"
            ),
        }),
        "string" => Ok(()),
        other => Err(CtlError::NotALock {
            key: key.to_owned(),
            found: format!("a {other}"),
        }),
    }
}

use crate::time::now_ms;

#[cfg(test)]
mod tests {
    use super::Holder;

    #[test]
    fn bare_tokens_of_older_versions_still_decode() {
        let holder = Holder::parse(b"2b1f0c7e-5d3a-4c2e-9a63-0e8f0f3a9b41");
        assert_eq!(holder.token, "2b1f0c7e-5d3a-4c2e-9a63-0e8f0f3a9b41");
        assert_eq!(holder.host, None);
    }

    #[test]
    fn metadata_decodes() {
        let holder = Holder::parse(
            b"t {\"host\":\"web-3\",\"pid\":42,\"acquired_at\":7,\"key_template\":\"a:<b>\"}",
        );
        assert_eq!(holder.host.as_deref(), Some("web-3"));
        assert_eq!(holder.pid, Some(42));
        assert_eq!(holder.acquired_at, Some(7));
        assert_eq!(holder.key_template.as_deref(), Some("a:<b>"));
        assert_eq!(Holder::parse(b"t {not json").token, "t");
        let odd = Holder::parse(b"t\xff {\"host\":\"h\"}");
        assert_eq!(odd.token_bytes, b"t\xff");
        assert_eq!(odd.token, "t\u{fffd}");
        assert_eq!(odd.host.as_deref(), Some("h"));
    }
}
