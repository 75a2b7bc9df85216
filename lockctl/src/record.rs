//! [`LockRecord`]: one lock as Redis holds it, read in one pipeline per key.

use serde::Serialize;

use crate::conn::Target;
use crate::error::CtlError;

/// Who holds (or waits for) a lock, decoded from a lock value (see `lockcore::holder`).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub(crate) struct Holder {
    /// The random token at the start of the value.
    pub(crate) token: String,
    pub(crate) host: Option<String>,
    pub(crate) pid: Option<u64>,
    pub(crate) label: Option<String>,
    /// Wall clock, ms since the Unix epoch.
    pub(crate) acquired_at: Option<u64>,
    pub(crate) key_template: Option<String>,
}

impl Holder {
    /// Decodes a value. A bare token (older versions) or metadata that does not parse gives a
    /// holder with the token only.
    pub(crate) fn parse(value: &str) -> Holder {
        let (token, meta) = lockcore::holder::split_value(value);
        let meta: serde_json::Map<String, serde_json::Value> = meta
            .and_then(|m| serde_json::from_str(m).ok())
            .unwrap_or_default();
        let text = |name: &str| meta.get(name).and_then(|v| v.as_str()).map(str::to_owned);
        let number = |name: &str| meta.get(name).and_then(serde_json::Value::as_u64);
        Holder {
            token: token.to_owned(),
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
    /// The full Redis key.
    pub(crate) key: String,
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

/// The replies to one key's pipeline: value, PTTL, queued values, queue entries.
type KeyReplies = (Option<String>, i64, Vec<String>, Vec<(String, String)>);

/// Reads `key` as a lock, `None` when it vanished (released or expired) meanwhile.
pub(crate) async fn read(
    target: &mut Target,
    prefix: &str,
    key: &str,
    server_now_ms: u64,
) -> Result<Option<LockRecord>, CtlError> {
    let (queue, entries) = lockcore::holder::waiter_queue_keys(prefix, key);
    // All keys share the lock key's slot, so one pipeline serves a cluster too.
    let (value, pttl, queued, entry_values): KeyReplies = redis::pipe()
        .get(key)
        .pttl(key)
        .lrange(&queue, 0, -1)
        .hgetall(&entries)
        .query_async(target)
        .await?;
    let Some(value) = value else {
        return Ok(None);
    };
    let holder = Holder::parse(&value);
    let waiters = queued
        .iter()
        .filter(|waiter| {
            entry_values
                .iter()
                .find(|(v, _)| v == *waiter)
                .and_then(|(_, entry)| entry.split('|').next()?.parse::<u64>().ok())
                .is_some_and(|expires| expires > server_now_ms)
        })
        .map(|waiter| Holder::parse(waiter))
        .collect();
    let held_ms = holder.acquired_at.map(|at| now_ms().saturating_sub(at));
    Ok(Some(LockRecord {
        key: key.to_owned(),
        pttl_ms: pttl,
        holder_object: holder.clone(),
        holder,
        held_ms,
        fencing_token: None,
        waiters,
    }))
}

/// Every lock whose key matches `pattern`, sorted by key; auxiliary keys are left out.
pub(crate) async fn list(
    target: &mut Target,
    prefix: &str,
    pattern: &str,
) -> Result<Vec<LockRecord>, CtlError> {
    let keys = target.scan_strings(pattern).await?;
    let now = server_time_ms(target).await?;
    let mut records = Vec::with_capacity(keys.len());
    for key in keys {
        if lockcore::holder::is_auxiliary_key(prefix, &key) {
            continue;
        }
        if let Some(record) = read(target, prefix, &key, now).await? {
            records.push(record);
        }
    }
    Ok(records)
}

/// One lock, checked: an error names the key when it is missing or not a lock.
pub(crate) async fn inspect(
    target: &mut Target,
    prefix: &str,
    key: &str,
) -> Result<LockRecord, CtlError> {
    check_is_lock(target, prefix, key).await?;
    let now = server_time_ms(target).await?;
    read(target, prefix, key, now)
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
        "string" if lockcore::holder::is_auxiliary_key(prefix, key) => Err(CtlError::NotALock {
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

/// The server's clock (`TIME`), in ms: waiter entries expire by it.
async fn server_time_ms(target: &mut Target) -> Result<u64, CtlError> {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(target).await?;
    Ok(secs * 1000 + micros / 1000)
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
        let holder = Holder::parse("2b1f0c7e-5d3a-4c2e-9a63-0e8f0f3a9b41");
        assert_eq!(holder.token, "2b1f0c7e-5d3a-4c2e-9a63-0e8f0f3a9b41");
        assert_eq!(holder.host, None);
    }

    #[test]
    fn metadata_decodes() {
        let holder = Holder::parse(
            "t {\"host\":\"web-3\",\"pid\":42,\"acquired_at\":7,\"key_template\":\"a:<b>\"}",
        );
        assert_eq!(holder.host.as_deref(), Some("web-3"));
        assert_eq!(holder.pid, Some(42));
        assert_eq!(holder.acquired_at, Some(7));
        assert_eq!(holder.key_template.as_deref(), Some("a:<b>"));
        assert_eq!(Holder::parse("t {not json").token, "t");
    }
}
