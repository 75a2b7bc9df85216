//! Holder metadata: who holds a lock, written into the lock's value at no extra round trip.
//!
//! # The lock value
//! The value stored at a lock key (what `SET NX` writes, what compare-and-delete, extend and
//! the watchdog compare as a whole, and what the hand-off queue stores for a waiter) is
//!
//! ```text
//! <token> <metadata>
//! 2b1f0c7e-5d3a-4c2e-9a63-0e8f0f3a9b41 {"host":"web-3","pid":4242,"label":"orders","acquired_at":1764579600123,"key_template":"order:lock:product:<product_id>"}
//! ```
//!
//! - `<token>`: the random 128-bit token ([`LockGuard::token`](crate::LockGuard::token)), a
//!   hyphenated UUID v4, always the first [`TOKEN_LEN`] bytes;
//! - one space, then the metadata as one compact JSON object: `host`, `pid`, `label` (only
//!   when set with [`LockManagerBuilder::process_label`](crate::LockManagerBuilder::process_label)),
//!   `acquired_at` (wall clock, ms since the Unix epoch) and `key_template` (only when the lock
//!   came through `#[distributed_lock]` and the expansion passed its template).
//!
//! The scripts treat the value as an opaque string, so the metadata costs no command and no
//! script change. A value that is a bare token (written by an older version) is still valid:
//! [`split_value`] returns no metadata for it.
//!
//! `acquired_at` is the wall-clock time at which the value was minted: the start of the
//! successful attempt, except for a call that queued for hand-off (single node), whose one
//! value (its identity in the queue) is minted when the call starts; there it is the time the
//! call began waiting, at most its wait budget before the hand-off.
//!
//! The static part (host, pid, label) is encoded once per manager; an acquire adds the token,
//! the time and the template.

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

/// The length of the token at the start of every lock value: a hyphenated UUID (36 bytes).
pub const TOKEN_LEN: usize = 36;

/// Splits a lock value into its token and its metadata JSON, if any.
///
/// A bare token (a value written by an older version) gives `(token, None)`; so does any value
/// without a space.
///
/// ```
/// let (token, meta) = lockcore::holder::split_value("2b1f0c7e-5d3a-4c2e-9a63-0e8f0f3a9b41 {\"pid\":1}");
/// assert_eq!(token, "2b1f0c7e-5d3a-4c2e-9a63-0e8f0f3a9b41");
/// assert_eq!(meta, Some("{\"pid\":1}"));
/// assert_eq!(lockcore::holder::split_value("abc"), ("abc", None));
/// ```
pub fn split_value(value: &str) -> (&str, Option<&str>) {
    match value.split_once(' ') {
        Some((token, meta)) => (token, Some(meta)),
        None => (value, None),
    }
}

/// The hand-off waiter queue of `lock_key` (the full key, prefix included), and the prefix of
/// its waiter keys. The queue is a Redis list of waiters' lock values in queue order; the
/// waiter key of a queued value is the prefix followed by the value's [token](token_of), and
/// exists while that waiter is live (it refreshes the key's 600 ms TTL). Its value is
/// `<ttl_ms>|<seq>|<channel length>|<channel><fencing counter key>`. All live under `prefix`
/// and in `lock_key`'s cluster slot.
///
/// A waiter's queued value is exactly the value it will hold once the lock is handed to it.
pub fn waiter_queue_keys(prefix: &str, lock_key: &str) -> (String, String) {
    crate::handoff::queue_keys(prefix, lock_key)
}

/// The waiter key of the queued lock value `value`, given the waiter key prefix from
/// [`waiter_queue_keys`].
pub fn waiter_key(waiter_prefix: &str, value: &str) -> String {
    let token = token_of(value);
    let mut key = String::with_capacity(waiter_prefix.len() + token.len());
    key.push_str(waiter_prefix);
    key.push_str(token);
    key
}

/// Whether `key` (full key, prefix included) is one of the library's auxiliary keys under
/// `prefix` (a fencing counter or a waiter queue) rather than a lock. Lock keys can never take
/// these names.
pub fn is_auxiliary_key(prefix: &str, key: &str) -> bool {
    key.strip_prefix(prefix).is_some_and(|name| {
        crate::key::RESERVED
            .iter()
            .any(|reserved| name.starts_with(reserved))
    })
}

/// The token part of a lock value minted by this crate.
pub(crate) fn token_of(value: &str) -> &str {
    split_value(value).0
}

/// The per-manager, precomputed part of every lock value.
#[derive(Debug, Clone)]
pub(crate) struct HolderStamp {
    /// `{"host":"..","pid":N[,"label":".."]`, without the closing brace.
    head: String,
}

impl HolderStamp {
    /// The stamp of this process, with an optional label.
    pub(crate) fn new(label: Option<&str>) -> Self {
        let host = gethostname::gethostname();
        let mut head = String::with_capacity(64);
        head.push_str("{\"host\":");
        push_json_str(&mut head, &host.to_string_lossy());
        head.push_str(",\"pid\":");
        head.push_str(&std::process::id().to_string());
        if let Some(label) = label {
            head.push_str(",\"label\":");
            push_json_str(&mut head, label);
        }
        HolderStamp { head }
    }

    /// A fresh lock value: a new random token and this stamp, timed now.
    pub(crate) fn mint(&self, key_template: Option<&str>) -> String {
        let mut value = String::with_capacity(TOKEN_LEN + self.head.len() + 48);
        let mut buf = uuid::Uuid::encode_buffer();
        value.push_str(uuid::Uuid::new_v4().hyphenated().encode_lower(&mut buf));
        value.push(' ');
        value.push_str(&self.head);
        // Writing into a `String` cannot fail.
        let _ = write!(value, ",\"acquired_at\":{}", now_ms());
        if let Some(template) = key_template {
            value.push_str(",\"key_template\":");
            push_json_str(&mut value, template);
        }
        value.push('}');
        value
    }
}

/// Wall-clock milliseconds since the Unix epoch (0 for a clock set before 1970).
fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

/// Appends `s` as a JSON string literal.
fn push_json_str(out: &mut String, s: &str) {
    out.push('"');
    if !s.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20) {
        out.push_str(s);
    } else {
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                c if u32::from(c) < 0x20 => {
                    let _ = write!(out, "\\u{:04x}", u32::from(c));
                }
                c => out.push(c),
            }
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_is_token_space_json() {
        let stamp = HolderStamp::new(Some("orders \"blue\"\n"));
        let value = stamp.mint(Some("order:<id>"));
        let (token, meta) = split_value(&value);
        assert_eq!(token.len(), TOKEN_LEN);
        assert!(uuid::Uuid::parse_str(token).is_ok());
        let meta: serde_json::Value = serde_json::from_str(meta.unwrap_or_default()).unwrap();
        assert_eq!(meta["pid"], std::process::id());
        assert_eq!(meta["label"], "orders \"blue\"\n");
        assert_eq!(meta["key_template"], "order:<id>");
        assert!(meta["host"].is_string());
        assert!(meta["acquired_at"].as_u64().unwrap() > 1_600_000_000_000);
    }

    #[test]
    fn auxiliary_keys_are_recognised() {
        let (queue, entries) = waiter_queue_keys("lock:", "lock:order:1");
        for key in [queue.as_str(), entries.as_str(), "lock:__fencing_counter__"] {
            assert!(is_auxiliary_key("lock:", key), "{key}");
        }
        assert!(!is_auxiliary_key("lock:", "lock:order:1"));
        assert!(!is_auxiliary_key("lock:", "other:__waitq__x"));
    }

    #[test]
    fn optional_fields_are_left_out() {
        let value = HolderStamp::new(None).mint(None);
        let meta: serde_json::Value = serde_json::from_str(split_value(&value).1.unwrap()).unwrap();
        assert!(meta.get("label").is_none());
        assert!(meta.get("key_template").is_none());
        assert_ne!(
            token_of(&value),
            token_of(&HolderStamp::new(None).mint(None))
        );
    }
}
