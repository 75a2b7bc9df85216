//! [`LockRecord`]: one lock as Redis holds it, read in one pipeline per key; [`IdemRecord`]:
//! one idempotency record (`<prefix>__idem__{<tag>}rec:<key>`, or its running first call's
//! lock `<prefix>__idem__{<tag>}lock:<key>`; see `lockcore::keyspace::idempotency_keys`).

use std::collections::{BTreeSet, HashMap};

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
    /// Always `"lock"` (idempotency records say `"idempotency"`).
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
}

/// `TIME` on the node that holds `KEYS[1]` (a pipeline's keyless `TIME` could go to any node of
/// a cluster).
const TIME_OF_KEY: &str = "return redis.call('TIME')";

/// Reads `key` as a lock, `None` when it vanished (released or expired) meanwhile.
pub(crate) async fn read(
    target: &mut Target,
    prefix: &str,
    key: &[u8],
) -> Result<Option<LockRecord>, CtlError> {
    // A key that is not UTF-8 is no lockcore lock: it has no waiter queue.
    let queues = std::str::from_utf8(key)
        .ok()
        .map(|key| lockcore::keyspace::waiter_queue_keys(prefix, key));
    // All keys share the lock key's slot, so one pipeline serves a cluster too.
    let mut pipe = redis::pipe();
    pipe.get(key).pttl(key);
    if let Some((queue, entries)) = &queues {
        pipe.lrange(queue, 0, -1)
            .hgetall(entries)
            .cmd("EVAL")
            .arg(TIME_OF_KEY)
            .arg(1)
            .arg(key);
    }
    let replies: Vec<redis::Value> = pipe.query_async(target).await?;
    let mut replies = replies.into_iter();
    let mut next = || replies.next().unwrap_or(redis::Value::Nil);
    let value: Option<Vec<u8>> = decode(next())?;
    let pttl: i64 = decode(next())?;
    let queued: Vec<Vec<u8>> = decode(next())?;
    let entries: HashMap<Vec<u8>, String> = decode(next())?;
    let (secs, micros): (u64, u64) = match next() {
        redis::Value::Nil => (0, 0),
        time => decode(time)?,
    };
    let Some(value) = value else {
        return Ok(None);
    };
    let holder = Holder::parse(&value);
    // A queued waiter is live while its entry's deadline (the server's clock) is ahead.
    let server_now_ms = secs.saturating_mul(1000) + micros / 1000;
    let waiters = queued
        .iter()
        .filter(|waiter| {
            let token = waiter.split(|&b| b == b' ').next().unwrap_or_default();
            entries
                .get(token)
                .and_then(|entry| lockcore::keyspace::entry_deadline_ms(entry))
                .is_some_and(|deadline| deadline > server_now_ms)
        })
        .map(|waiter| Holder::parse(waiter))
        .collect();
    let held_ms = holder.acquired_at.map(|at| now_ms().saturating_sub(at));
    Ok(Some(LockRecord {
        kind: "lock",
        key: String::from_utf8_lossy(key).into_owned(),
        key_bytes: key.to_vec(),
        pttl_ms: pttl,
        holder_object: holder.clone(),
        holder,
        held_ms,
        fencing_token: None,
        waiters,
    }))
}

/// One pipeline reply as `T`.
fn decode<T: redis::FromRedisValue>(value: redis::Value) -> Result<T, CtlError> {
    redis::from_redis_value(value).map_err(|e| CtlError::Redis(e.into()))
}

/// Every lock whose key matches `pattern`, sorted by key, and the idempotency records found
/// by it (a record key or a running call's lock key), sorted by idempotency key; other
/// auxiliary keys are left out.
pub(crate) async fn list(
    target: &mut Target,
    prefix: &str,
    pattern: &str,
) -> Result<(Vec<LockRecord>, Vec<IdemRecord>), CtlError> {
    let keys = target.scan_strings(pattern).await?;
    let mut records = Vec::with_capacity(keys.len());
    let mut idem_keys = BTreeSet::new();
    for key in keys {
        if let Ok(text) = std::str::from_utf8(&key) {
            if let Some(idem_key) = idempotency_key(prefix, text) {
                idem_keys.insert(idem_key.to_owned());
                continue;
            }
            if lockcore::keyspace::is_auxiliary_key(prefix, text) {
                continue;
            }
        }
        if let Some(record) = read(target, prefix, &key).await? {
            records.push(record);
        }
    }
    let mut idem = Vec::with_capacity(idem_keys.len());
    for idem_key in idem_keys {
        if let Some(record) = read_idempotency(target, prefix, &idem_key, false).await? {
            idem.push(record);
        }
    }
    Ok((records, idem))
}

/// One lock, checked: an error names the key when it is missing or not a lock.
pub(crate) async fn inspect(
    target: &mut Target,
    prefix: &str,
    key: &str,
) -> Result<LockRecord, CtlError> {
    check_is_lock(target, prefix, key).await?;
    read(target, prefix, key.as_bytes())
        .await?
        .ok_or_else(|| CtlError::NoSuchKey {
            key: key.to_owned(),
        })
}

/// One idempotency record, by its record key or its lock key: an error names the key when
/// neither the record nor a running first call exists. The stored JSON is included.
pub(crate) async fn inspect_idempotency(
    target: &mut Target,
    prefix: &str,
    idem_key: &str,
    key: &str,
) -> Result<IdemRecord, CtlError> {
    read_idempotency(target, prefix, idem_key, true)
        .await?
        .ok_or_else(|| CtlError::NoSuchKey {
            key: key.to_owned(),
        })
}

/// The idempotency key of a record key or of its lock key, prefix left out.
pub(crate) fn idempotency_key<'k>(prefix: &str, key: &'k str) -> Option<&'k str> {
    lockcore::keyspace::idempotency_key_of(prefix, key)
}

/// One idempotency record: `done` (stored) or `running` (its first call holds the lock and
/// has stored nothing yet).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct IdemRecord {
    /// Always `"idempotency"`.
    pub(crate) kind: &'static str,
    /// The record key (full, prefix included); it exists once the state is `done`.
    pub(crate) key: String,
    /// The lock key that serialises the first call.
    pub(crate) lock_key: String,
    /// The idempotency key as the application passed it.
    pub(crate) idempotency_key: String,
    /// `running` or `done`.
    pub(crate) state: &'static str,
    /// The record's remaining TTL (`done`) or the lock's (`running`), in ms; -1: no expiry.
    pub(crate) pttl_ms: i64,
    /// Since the record was written (`done`) or the first call took the lock (`running`).
    pub(crate) age_ms: Option<u64>,
    /// The stored record's size in bytes (`done`).
    pub(crate) size_bytes: Option<u64>,
    /// When the record was written, ms since the Unix epoch (`done`).
    pub(crate) written_at: Option<u64>,
    /// The request fingerprint stored with the record, if any.
    pub(crate) fingerprint: Option<String>,
    /// Who runs the first call (`running`).
    pub(crate) holder: Option<Holder>,
    /// Duplicates queued for the first call's lock, first in line first.
    pub(crate) waiters: Vec<Holder>,
    /// The stored JSON (`inspect` only; a string when it is not JSON).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) record: Option<serde_json::Value>,
}

/// Reads the idempotency record of `idem_key`, `None` when there is neither a record nor a
/// running first call.
pub(crate) async fn read_idempotency(
    target: &mut Target,
    prefix: &str,
    idem_key: &str,
    with_value: bool,
) -> Result<Option<IdemRecord>, CtlError> {
    let (record_key, lock_key) = lockcore::keyspace::idempotency_keys(prefix, idem_key);
    let (text, pttl): (Option<Vec<u8>>, i64) = redis::pipe()
        .get(&record_key)
        .pttl(&record_key)
        .query_async(target)
        .await?;
    let mut record = IdemRecord {
        kind: "idempotency",
        key: record_key,
        lock_key: lock_key.clone(),
        idempotency_key: idem_key.to_owned(),
        state: "done",
        pttl_ms: pttl,
        age_ms: None,
        size_bytes: None,
        written_at: None,
        fingerprint: None,
        holder: None,
        waiters: Vec::new(),
        record: None,
    };
    if let Some(text) = text {
        let parsed: Option<serde_json::Value> = serde_json::from_slice(&text).ok();
        let field = |name: &str| parsed.as_ref().and_then(|v| v.get(name));
        record.written_at = field("at_ms").and_then(serde_json::Value::as_u64);
        record.fingerprint = field("fingerprint")
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned);
        record.age_ms = record.written_at.map(|at| now_ms().saturating_sub(at));
        record.size_bytes = u64::try_from(text.len()).ok();
        if with_value {
            record.record = Some(parsed.unwrap_or_else(|| {
                serde_json::Value::String(String::from_utf8_lossy(&text).into_owned())
            }));
        }
        return Ok(Some(record));
    }
    let Some(lock) = read(target, prefix, lock_key.as_bytes()).await? else {
        return Ok(None);
    };
    record.state = "running";
    record.pttl_ms = lock.pttl_ms;
    record.age_ms = lock.held_ms;
    record.holder = Some(lock.holder);
    record.waiters = lock.waiters;
    Ok(Some(record))
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
        "string" if lockcore::keyspace::is_auxiliary_key(prefix, key) => Err(CtlError::NotALock {
            key: key.to_owned(),
            found: "an auxiliary key of lockcore (fencing counter or waiter queue)".to_owned(),
        }),
        "string" => Ok(()),
        other => Err(CtlError::NotALock {
            key: key.to_owned(),
            found: format!("a {other}"),
        }),
    }
}

/// This machine's wall clock, in ms since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

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
