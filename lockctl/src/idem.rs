//! [`IdemRecord`]: one idempotency record (`<prefix>__idem__{<tag>}rec:<key>`, or its running
//! first call's lock `<prefix>__idem__{<tag>}lock:<key>`; see
//! `lockcore::keyspace::idempotency_keys`).

use serde::Serialize;

use crate::conn::Target;
use crate::error::CtlError;
use crate::record::{self, Found, Holder};
use crate::time::now_ms;

/// The idempotency key of a record key or of its lock key, prefix left out.
pub(crate) fn idempotency_key<'k>(prefix: &str, key: &'k str) -> Option<&'k str> {
    lockcore::keyspace::idempotency_key_of(prefix, key)
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
    // Whatever its type: a list under a record's name is no record, and no failed listing.
    let stored = record::read_raw(target, record_key.as_bytes()).await?;
    let mut record = IdemRecord {
        kind: "idempotency",
        key: record_key,
        lock_key: lock_key.clone(),
        idempotency_key: idem_key.to_owned(),
        state: "done",
        pttl_ms: stored.pttl_ms,
        age_ms: None,
        size_bytes: None,
        written_at: None,
        fingerprint: None,
        holder: None,
        waiters: Vec::new(),
        record: None,
    };
    if let Some(text) = stored.value {
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
    let Some(Found::Lock(lock)) = record::read(target, prefix, lock_key.as_bytes()).await? else {
        return Ok(None);
    };
    record.state = "running";
    record.pttl_ms = lock.pttl_ms;
    record.age_ms = lock.held_ms;
    record.holder = Some(lock.holder);
    record.waiters = lock.waiters;
    Ok(Some(record))
}
