//! Key rules: the Redis key is the manager's prefix followed by the caller's key, byte for byte.
//!
//! Nothing is hashed, escaped or normalised (`café` in NFC and NFD are two locks). Braces are
//! kept, so Redis Cluster hash tags such as `{user:1}` work as written.

use crate::LockError;
use crate::fencing::COUNTER_NAME;
use crate::handoff::{ENTRIES_NAME, QUEUE_NAME};

/// The name space of idempotency records and their locks (`__idem__{tag}rec:..`,
/// `__idem__{tag}lock:..`).
pub(crate) const IDEMPOTENCY_NAME: &str = "__idem__";
/// What follows the hash tag in an idempotency record's key, and in its lock's key.
const IDEMPOTENCY_RECORD: &str = "rec:";
const IDEMPOTENCY_LOCK: &str = "lock:";

/// The record key and the lock key of idempotency key `key` under `prefix`:
/// `<prefix>__idem__{<tag>}rec:<key>` and `<prefix>__idem__{<tag>}lock:<key>`. `<tag>` is a
/// short hash tag derived from `key` alone, so both keys share one Redis Cluster slot (the
/// record is written by a script that checks the lock), whatever `prefix` and `key` contain:
/// the first `{` of either key is in the common part before the tag's `}`.
pub(crate) fn idempotency_keys(prefix: &str, key: &str) -> (String, String) {
    let tag = crate::slot::tag_for(key);
    let named = |kind: &str| {
        let mut full = String::with_capacity(
            prefix.len() + IDEMPOTENCY_NAME.len() + tag.len() + 2 + kind.len() + key.len(),
        );
        for part in [prefix, IDEMPOTENCY_NAME, "{", tag, "}", kind, key] {
            full.push_str(part);
        }
        full
    };
    (named(IDEMPOTENCY_RECORD), named(IDEMPOTENCY_LOCK))
}

/// The idempotency key of a record key or lock key from [`idempotency_keys`]; `None` for any
/// other key.
pub(crate) fn idempotency_key_of<'k>(prefix: &str, full: &'k str) -> Option<&'k str> {
    let tagged = full
        .strip_prefix(prefix)?
        .strip_prefix(IDEMPOTENCY_NAME)?
        .strip_prefix('{')?;
    let (_, rest) = tagged.split_once('}')?;
    rest.strip_prefix(IDEMPOTENCY_RECORD)
        .or_else(|| rest.strip_prefix(IDEMPOTENCY_LOCK))
}

/// Key name prefixes of lockcore's auxiliary keys (fencing counter, waiter queue, idempotency
/// records).
pub(crate) const RESERVED: [&str; 4] = [COUNTER_NAME, QUEUE_NAME, ENTRIES_NAME, IDEMPOTENCY_NAME];

/// What every name in [`RESERVED`] starts with.
const RESERVED_LEAD: &str = "__";

/// The reserved name `key` starts with, if any.
fn reserved_prefix(key: &str) -> Option<&'static str> {
    if !key.starts_with(RESERVED_LEAD) {
        return None;
    }
    RESERVED.iter().copied().find(|name| key.starts_with(name))
}

/// The default key prefix, `"lock:"`.
pub const DEFAULT_KEY_PREFIX: &str = "lock:";

/// Joins `prefix` and `key` into the full Redis key.
///
/// # Errors
/// [`LockError::InvalidKey`] when `key` is empty (a lock on the bare prefix is almost always a
/// template that rendered nothing), or starts with a name reserved for lockcore's own keys:
/// `__fencing_counter__`, `__waitq__`, `__waiters__`, `__idem__`.
pub(crate) fn full_key(prefix: &str, key: &str) -> Result<String, LockError> {
    if key.is_empty() {
        return Err(LockError::InvalidKey {
            reason: format!(
                "the key is empty (the Redis key would be only the prefix `{prefix}`); expected a non-empty key such as `order:42`"
            ),
        });
    }
    // Every reserved name starts with `__` (checked by a test): most keys are passed after
    // one byte comparison.
    if let Some(reserved) = reserved_prefix(key) {
        return Err(LockError::InvalidKey {
            reason: format!(
                "the key `{key}` starts with `{reserved}`, which is reserved for lockcore's own keys; expected any other key"
            ),
        });
    }
    let mut full = String::with_capacity(prefix.len() + key.len());
    full.push_str(prefix);
    full.push_str(key);
    Ok(full)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_key_is_rejected_with_the_prefix_named() {
        let err = full_key("lock:", "").unwrap_err();
        assert!(matches!(&err, LockError::InvalidKey { reason } if reason.contains("`lock:`")));
    }

    #[test]
    fn the_fencing_counter_name_is_reserved() {
        let err = full_key("lock:", "__fencing_counter__").unwrap_err();
        assert!(matches!(&err, LockError::InvalidKey { reason } if reason.contains("reserved")));
    }

    #[test]
    fn every_reserved_name_has_the_common_lead() {
        for name in RESERVED {
            assert!(name.starts_with(RESERVED_LEAD), "{name}");
            assert_eq!(reserved_prefix(&format!("{name}x")), Some(name));
        }
        assert_eq!(reserved_prefix("_x__waitq__"), None);
        assert_eq!(reserved_prefix("__other"), None);
    }

    #[test]
    fn an_idempotency_record_shares_its_locks_slot_and_names_its_key() {
        for prefix in ["lock:", "", "{app}:", "a{", "}{"] {
            for key in ["order:req:1", "{user:7}:req", "caf\u{e9}", "{}", "x}y{"] {
                let (record, lock) = idempotency_keys(prefix, key);
                assert_eq!(
                    crate::slot::key_hash_slot(record.as_bytes()),
                    crate::slot::key_hash_slot(lock.as_bytes()),
                    "{record} / {lock}"
                );
                assert_eq!(idempotency_key_of(prefix, &record), Some(key));
                assert_eq!(idempotency_key_of(prefix, &lock), Some(key));
                let name = record.strip_prefix(prefix).unwrap_or_default();
                assert_eq!(reserved_prefix(name), Some(IDEMPOTENCY_NAME), "{record}");
            }
        }
        let (record, lock) = idempotency_keys("lock:", "req:1");
        let tag = crate::slot::tag_for("req:1");
        assert_eq!(record, format!("lock:__idem__{{{tag}}}rec:req:1"));
        assert_eq!(lock, format!("lock:__idem__{{{tag}}}lock:req:1"));
        assert_eq!(idempotency_key_of("lock:", "lock:order:1"), None);
        assert_eq!(idempotency_key_of("lock:", "lock:__idem__rec:req:1"), None);
    }

    #[test]
    fn keys_are_kept_byte_for_byte() {
        assert_eq!(
            full_key("lock:", "{user:1}:cart").unwrap(),
            "lock:{user:1}:cart"
        );
        let nfc = "caf\u{e9}";
        let nfd = "cafe\u{301}";
        assert_ne!(full_key("", nfc).unwrap(), full_key("", nfd).unwrap());
    }
}

/// Key checks, fuzzed (proptest, with shrinking): any key either joins byte for byte or is
/// rejected with a reason that says what was expected.
#[cfg(test)]
mod proptests {
    use proptest::prelude::*;

    use super::*;

    fn key() -> impl Strategy<Value = String> {
        prop_oneof![
            Just(String::new()),
            "\\PC{0,40}",
            (proptest::sample::select(RESERVED.to_vec()), "\\PC{0,8}")
                .prop_map(|(reserved, rest)| format!("{reserved}{rest}")),
        ]
    }

    proptest! {
        #[test]
        fn keys_join_byte_for_byte_or_name_what_was_expected(prefix in "\\PC{0,8}", key in key()) {
            match full_key(&prefix, &key) {
                Ok(full) => {
                    prop_assert_eq!(full.as_bytes(), [prefix.as_bytes(), key.as_bytes()].concat());
                    prop_assert!(!key.is_empty());
                    prop_assert!(!RESERVED.iter().any(|r| key.starts_with(r)));
                }
                Err(LockError::InvalidKey { reason }) => {
                    prop_assert!(reason.contains("expected"), "{}", reason);
                    prop_assert!(key.is_empty() || RESERVED.iter().any(|r| key.starts_with(r)));
                }
                Err(other) => prop_assert!(false, "unexpected {:?}", other),
            }
        }
    }
}
