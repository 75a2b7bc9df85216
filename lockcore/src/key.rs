//! Key rules: the Redis key is the manager's prefix followed by the caller's key, byte for byte.
//!
//! Nothing is hashed, escaped or normalised (`café` in NFC and NFD are two locks). Braces are
//! kept, so Redis Cluster hash tags such as `{user:1}` work as written.

use crate::LockError;
use crate::escape::Escaped;
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

/// The segments that mark lockcore's own names (fencing counters, waiter queues and waiter
/// keys, wake-up channels, idempotency records). Every auxiliary key and channel holds one
/// right after its manager's prefix; no lock key holds one anywhere, whatever its prefix, so
/// no manager (with a nested prefix, or none) can take another manager's auxiliary keys.
pub(crate) const RESERVED: [&str; 5] = [
    COUNTER_NAME,
    QUEUE_NAME,
    ENTRIES_NAME,
    IDEMPOTENCY_NAME,
    WAKE_SEGMENT,
];

/// The wake-up channels' name ([`WAKE_NAME`](crate::handoff::WAKE_NAME)) without its `:`.
const WAKE_SEGMENT: &str = "__wake__";

/// What every name in [`RESERVED`] starts with.
const RESERVED_LEAD: &str = "__";

/// The first reserved segment that `name` holds anywhere, if any.
pub(crate) fn reserved_segment(name: &str) -> Option<&'static str> {
    // Every reserved segment starts with `__` (checked by a test): most names are passed
    // after one scan for it.
    if !name.contains(RESERVED_LEAD) {
        return None;
    }
    RESERVED
        .iter()
        .copied()
        .find(|segment| name.contains(segment))
}

/// The default key prefix, `"lock:"`.
pub const DEFAULT_KEY_PREFIX: &str = "lock:";

/// Checks a manager's key prefix: it may be empty, but it must hold no reserved segment (every
/// key under it would be refused).
///
/// # Errors
/// [`LockError::InvalidOptions`] naming the prefix and the segment.
pub(crate) fn check_prefix(prefix: &str) -> Result<(), LockError> {
    match reserved_segment(prefix) {
        None => Ok(()),
        Some(segment) => Err(LockError::InvalidOptions {
            reason: format!(
                "key_prefix `{}` holds `{segment}`, which is reserved for lockcore's own keys; expected a prefix without it, such as `lock:`",
                Escaped(prefix)
            ),
        }),
    }
}

/// Joins `prefix` and `key` into the full Redis key.
///
/// # Errors
/// [`LockError::InvalidKey`] when `key` is empty (a lock on the bare prefix is almost always a
/// template that rendered nothing), or when the full key holds, anywhere, a segment reserved
/// for lockcore's own keys: `__fencing_counter__`, `__waitq__`, `__waiters__`, `__idem__`,
/// `__wake__`.
pub(crate) fn full_key(prefix: &str, key: &str) -> Result<String, LockError> {
    if key.is_empty() {
        return Err(LockError::InvalidKey {
            reason: format!(
                "the key is empty (the Redis key would be only the prefix `{}`); expected a non-empty key such as `order:42`",
                Escaped(prefix)
            ),
        });
    }
    let mut full = String::with_capacity(prefix.len() + key.len());
    full.push_str(prefix);
    full.push_str(key);
    if let Some(segment) = reserved_segment(&full) {
        return Err(LockError::InvalidKey {
            reason: format!(
                "the key `{}` (Redis key `{}`) holds `{segment}`, which is reserved for lockcore's own keys under any prefix; expected a key without it",
                Escaped(key),
                Escaped(&full)
            ),
        });
    }
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
            assert_eq!(reserved_segment(&format!("{name}x")), Some(name));
            assert_eq!(reserved_segment(&format!("a:{name}")), Some(name));
        }
        assert_eq!(reserved_segment("_x__waitq_"), None);
        assert_eq!(reserved_segment("__other"), None);
        assert!(crate::handoff::WAKE_NAME.starts_with(WAKE_SEGMENT));
    }

    /// A nested prefix cannot reach the auxiliary names of a shorter one, nor the other way.
    #[test]
    fn reserved_segments_are_refused_after_any_prefix() {
        for (prefix, key) in [
            ("", "lock:__fencing_counter__"),
            ("lock:", "sub:__waitq__{x}k"),
            ("lo", "ck:__waiters__{x}k:t"),
            ("", "lock:__idem__rec:1"),
            ("", "lock:__wake__:0"),
            ("lock:_", "_waitq__x"),
        ] {
            let err = full_key(prefix, key).unwrap_err();
            assert!(
                matches!(&err, LockError::InvalidKey { reason } if reason.contains(key) && reason.contains("reserved")),
                "{prefix:?} {key:?}: {err}"
            );
        }
        assert!(check_prefix("lock:").is_ok() && check_prefix("").is_ok());
        assert!(check_prefix("a__waitq__").is_err());
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
                assert_eq!(reserved_segment(name), Some(IDEMPOTENCY_NAME), "{record}");
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

/// Every auxiliary name, of a manager with any prefix, holds a reserved segment; no accepted
/// full key does: no manager can take another manager's auxiliary keys.
#[cfg(test)]
mod auxiliary_names {
    use proptest::prelude::*;

    use super::*;
    use crate::fencing::{FencingCounter, counter_key};

    fn names_of(prefix: &str, lock_key: &str) -> Vec<String> {
        let (queue, waiter_prefix) = crate::handoff::queue_keys(prefix, lock_key);
        let name = &lock_key[prefix.len()..];
        vec![
            counter_key(prefix, lock_key, FencingCounter::PerPrefix),
            counter_key(prefix, lock_key, FencingCounter::PerSlot),
            queue,
            format!("{waiter_prefix}2b1f0c7e-5d3a-4c2e-9a63-0e8f0f3a9b41"),
            crate::handoff::Handoff::channel_for(prefix),
            format!("{prefix}{IDEMPOTENCY_NAME}rec:{name}"),
            format!("{prefix}{IDEMPOTENCY_NAME}lock:{name}"),
        ]
    }

    proptest! {
        #[test]
        fn auxiliary_names_and_lock_keys_never_meet(
            owner in "[a-z:_{}]{0,6}",
            other in "[a-z:_{}]{0,6}",
            key in "[a-z:_{}]{1,12}",
            wanted in 0..7usize,
        ) {
            prop_assume!(check_prefix(&owner).is_ok() && check_prefix(&other).is_ok());
            let Ok(lock_key) = full_key(&owner, &key) else { return Ok(()) };
            let names = names_of(&owner, &lock_key);
            for name in &names {
                prop_assert!(reserved_segment(name).is_some(), "{}", name);
            }
            // Another manager asking for exactly that name is refused.
            let wanted = &names[wanted];
            if let Some(asked) = wanted.strip_prefix(other.as_str()) && !asked.is_empty() {
                prop_assert!(full_key(&other, asked).is_err(), "{:?} took {}", other, wanted);
            }
        }
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
            (
                "\\PC{0,8}",
                proptest::sample::select(RESERVED.to_vec()),
                "\\PC{0,8}"
            )
                .prop_map(|(lead, reserved, rest)| format!("{lead}{reserved}{rest}")),
        ]
    }

    proptest! {
        #[test]
        fn keys_join_byte_for_byte_or_name_what_was_expected(prefix in "\\PC{0,8}", key in key()) {
            match full_key(&prefix, &key) {
                Ok(full) => {
                    prop_assert_eq!(full.as_bytes(), [prefix.as_bytes(), key.as_bytes()].concat());
                    prop_assert!(!key.is_empty());
                    prop_assert!(!RESERVED.iter().any(|r| full.contains(r)));
                }
                Err(LockError::InvalidKey { reason }) => {
                    prop_assert!(reason.contains("expected"), "{}", reason);
                    let full = format!("{prefix}{key}");
                    prop_assert!(key.is_empty() || RESERVED.iter().any(|r| full.contains(r)));
                }
                Err(other) => prop_assert!(false, "unexpected {:?}", other),
            }
        }
    }
}
