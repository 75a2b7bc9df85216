//! Every name lockcore gives a Redis key or channel, and the format of the lock value: the
//! one place that knows them. Public for tools that read lockcore's keys (`lockctl`).
//!
//! # Keys
//! The lock key is the manager's prefix followed by the caller's key, byte for byte. Nothing is
//! hashed, escaped or normalised (`café` in NFC and NFD are two locks). Braces are kept, so
//! Redis Cluster hash tags such as `{user:1}` work as written.
//!
//! Beside a lock key `<prefix><name>` live (every one under the prefix, so one ACL rule
//! `~<prefix>*` covers them, and in the lock key's cluster slot unless said otherwise):
//!
//! | key | type | what |
//! |---|---|---|
//! | `<prefix>__fencing_counter__` | string (integer) | the fencing counter of a prefix ([`FencingCounter::PerPrefix`]; not in the lock key's slot) |
//! | `<prefix>__fencing_counter__{<tag>}` | string (integer) | the fencing counter of a cluster slot ([`FencingCounter::PerSlot`]) |
//! | `<prefix>__waitq__{<tag>}<name>` | list | the waiter queue: waiters' lock values in arrival order |
//! | `<prefix>__waiters__{<tag>}<name>` | hash | the waiters' entries, by token (see [`waiter_queue_keys`]) |
//! | `<prefix>__shares__{<tag>}<name>` | sorted set | the shares held (a semaphore's permits, a read-write lock's readers): tokens scored by lease deadline (see [`shares_key`]) |
//! | `<prefix>__idem__{<tag>}rec:<key>`, `..lock:<key>` | string | an idempotency record and its first call's lock (see [`idempotency_keys`]) |
//!
//! `<tag>` is a short hash tag whose cluster slot is the lock key's. Each manager's wake-up
//! channel is `<prefix>__wake__:<uuid>` (one ACL rule `&<prefix>*` covers them).
//!
//! # The lock value
//! The value stored at a lock key (what `SET NX` writes, and what the hand-off queue stores for
//! a waiter) is
//!
//! ```text
//! <token> <metadata>
//! 2b1f0c7e-5d3a-4c2e-9a63-0e8f0f3a9b41 {"host":"web-3","pid":4242,"label":"orders","acquired_at":1764579600123,"key_template":"order:lock:product:<product_id>"}
//! ```
//!
//! - `<token>`: the random 128-bit token ([`LockGuard::token`](crate::LockGuard::token)), a
//!   hyphenated UUID v4, always the first [`TOKEN_LEN`] bytes; release, extend and renewal
//!   recognise their holder by it;
//! - one space, then the metadata as one compact JSON object: `host`, `pid`, `label` (only
//!   when set with [`LockManagerBuilder::process_label`](crate::LockManagerBuilder::process_label)),
//!   `acquired_at` (wall clock, ms since the Unix epoch) and `key_template` (only when the lock
//!   came through `#[distributed_lock]` and the expansion passed its template).
//!
//! `acquired_at` is the wall-clock time at which the lock was taken: the client's clock when
//! the value is minted, just before the attempt that takes a free key; the Redis server's clock
//! (`TIME`) when a queued waiter gets the key, by a hand-over's grant or by its own re-check,
//! and when the acquire has a minimum hold ([`LockOptions::hold_at_least`](crate::LockOptions::hold_at_least),
//! measured from it; under Redlock each node stamps its own clock):
//! the script then stores the value with `acquired_at` replaced, and the guard holds the stored
//! value ([`LockGuard::stored_value`](crate::LockGuard::stored_value)). A value that is a bare
//! token (written by another client) has no metadata: [`split_value`] returns none for it.

use crate::error::LockError;
use crate::protocol::fencing::FencingCounter;
use crate::transport::slot;
use crate::util::escape::Escaped;

/// The fencing counters' name, after the prefix.
pub const COUNTER_NAME: &str = "__fencing_counter__";
/// The waiter queues' name, after the prefix.
pub const QUEUE_NAME: &str = "__waitq__";
/// The waiter entries' name, after the prefix.
pub const ENTRIES_NAME: &str = "__waiters__";
/// The share sets' name, after the prefix; also the token of the marker that a lock key holds
/// while shares are held ([`SHARES_MARKER`]).
pub const SHARES_NAME: &str = "__shares__";
/// The first word of the value a lock key holds while a semaphore's permits or a read-write
/// lock's readers hold it: `__shares__ {"permits":<n>}` or `__shares__ {"mode":"read"}`. It is
/// no token (tokens are UUIDs), so no release or renewal of a plain lock ever takes it, and a
/// plain `SET NX` of the key finds it held.
pub const SHARES_MARKER: &str = SHARES_NAME;
/// The name space of idempotency records and their locks, after the prefix.
pub const IDEMPOTENCY_NAME: &str = "__idem__";
/// The wake-up channels' name, after the prefix (a manager's uuid follows).
pub const WAKE_NAME: &str = "__wake__:";
/// What follows the hash tag in an idempotency record's key, and in its lock's key.
const IDEMPOTENCY_RECORD: &str = "rec:";
const IDEMPOTENCY_LOCK: &str = "lock:";

/// The length of the token at the start of every lock value: a hyphenated UUID (36 bytes).
pub const TOKEN_LEN: usize = 36;

/// Splits a lock value into its token and its metadata JSON, if any.
///
/// A bare token (a value written by another client) gives `(token, None)`; so does any value
/// without a space.
///
/// ```
/// let (token, meta) = lockcore::keyspace::split_value("2b1f0c7e-5d3a-4c2e-9a63-0e8f0f3a9b41 {\"pid\":1}");
/// assert_eq!(token, "2b1f0c7e-5d3a-4c2e-9a63-0e8f0f3a9b41");
/// assert_eq!(meta, Some("{\"pid\":1}"));
/// assert_eq!(lockcore::keyspace::split_value("abc"), ("abc", None));
/// ```
pub fn split_value(value: &str) -> (&str, Option<&str>) {
    match value.split_once(' ') {
        Some((token, meta)) => (token, Some(meta)),
        None => (value, None),
    }
}

/// The token part of a lock value: its first word.
pub(crate) fn token_of(value: &str) -> &str {
    split_value(value).0
}

/// `parts` joined, in one allocation of the exact size (`format!` costs several times as much
/// on the acquire path: argument dispatch, padding checks, a capacity guess, a re-allocation).
fn concat(parts: &[&str]) -> String {
    let mut joined = String::with_capacity(parts.iter().map(|part| part.len()).sum());
    for part in parts {
        joined.push_str(part);
    }
    joined
}

/// The fencing counter key for `lock_key` (the full key, prefix included) under `prefix`:
/// `<prefix>__fencing_counter__` per prefix, `<prefix>__fencing_counter__{<tag>}` per slot (in
/// `lock_key`'s cluster slot), and `lock_key` itself with fencing off (the scripts mint
/// nothing when the counter key is the lock key).
///
/// ```
/// use lockcore::{FencingCounter, keyspace::counter_key};
/// assert_eq!(counter_key("lock:", "lock:a", FencingCounter::PerPrefix), "lock:__fencing_counter__");
/// assert_eq!(counter_key("lock:", "lock:a", FencingCounter::Off), "lock:a");
/// ```
pub fn counter_key(prefix: &str, lock_key: &str, mode: FencingCounter) -> String {
    match mode {
        FencingCounter::PerPrefix => concat(&[prefix, COUNTER_NAME]),
        FencingCounter::PerSlot => {
            concat(&[prefix, COUNTER_NAME, "{", slot::tag_for(lock_key), "}"])
        }
        FencingCounter::Off => lock_key.to_owned(),
    }
}

/// The hand-off waiter queue of `lock_key` (the full key, prefix included) and its entries. The
/// queue is a Redis list of waiters' lock values in queue order; the entries are a hash with one
/// field per queued waiter's token, whose value is
/// `<deadline_ms>|<ttl_ms>|<seq>|<claim_ms>|<counter length>|<fencing counter key><channel>`:
/// the waiter counts as live until `deadline_ms` by the Redis server's clock (`TIME`, ms since
/// the Unix epoch; see [`entry_deadline_ms`]), and a release skips a queued value whose entry
/// is missing or past its deadline. Both live under `prefix` and in `lock_key`'s cluster slot.
///
/// A waiter's queued value is the value it will hold once the lock is handed to it, with its
/// `acquired_at` stamped with the time of the grant.
///
/// ```
/// let (queue, entries) = lockcore::keyspace::waiter_queue_keys("lock:", "lock:order:1");
/// assert!(queue.starts_with("lock:__waitq__{") && queue.ends_with("}order:1"));
/// assert!(entries.starts_with("lock:__waiters__{") && entries.ends_with("}order:1"));
/// ```
pub fn waiter_queue_keys(prefix: &str, lock_key: &str) -> (String, String) {
    let tag = slot::tag_for(lock_key);
    (
        aux_key(prefix, QUEUE_NAME, tag, lock_key),
        aux_key(prefix, ENTRIES_NAME, tag, lock_key),
    )
}

/// The waiter queue of `lock_key`, the first of [`waiter_queue_keys`].
pub(crate) fn queue_key(prefix: &str, lock_key: &str) -> String {
    aux_key(prefix, QUEUE_NAME, slot::tag_for(lock_key), lock_key)
}

/// The share set of `lock_key` (the full key, prefix included): a sorted set whose members are
/// the tokens of the shares held (a semaphore's permits, a read-write lock's readers), each
/// scored by its lease deadline in ms since the Unix epoch by the Redis server's clock (`TIME`).
/// A member whose score has passed holds nothing (the scripts drop it). While it has members
/// the lock key holds [`SHARES_MARKER`] until the last deadline. Under `prefix`, in `lock_key`'s
/// cluster slot.
///
/// ```
/// let set = lockcore::keyspace::shares_key("lock:", "lock:pool");
/// assert!(set.starts_with("lock:__shares__{") && set.ends_with("}pool"));
/// ```
pub fn shares_key(prefix: &str, lock_key: &str) -> String {
    aux_key(prefix, SHARES_NAME, slot::tag_for(lock_key), lock_key)
}

/// Whether `value` (a lock key's value) is the marker of shares held ([`SHARES_MARKER`]).
pub fn is_shares_marker(value: &str) -> bool {
    split_value(value).0 == SHARES_MARKER
}

/// `<prefix><kind>{<tag>}<name>`: an auxiliary key of `lock_key` in its cluster slot, whose
/// hash tag is `tag`.
fn aux_key(prefix: &str, kind: &str, tag: &str, lock_key: &str) -> String {
    let name = lock_key.strip_prefix(prefix).unwrap_or(lock_key);
    concat(&[prefix, kind, "{", tag, "}", name])
}

/// The deadline (ms since the Unix epoch, by the Redis server's clock) until which the waiter
/// whose entry is `entry` counts as live; `None` for a malformed entry.
///
/// ```
/// assert_eq!(lockcore::keyspace::entry_deadline_ms("1764579600123|10000|2|500|5|lock:c"), Some(1764579600123));
/// assert_eq!(lockcore::keyspace::entry_deadline_ms("garbage"), None);
/// ```
pub fn entry_deadline_ms(entry: &str) -> Option<u64> {
    entry.split_once('|')?.0.parse().ok()
}

/// A fresh wake-up channel for a manager with this key prefix: `<prefix>__wake__:<uuid>`.
pub(crate) fn wake_channel(prefix: &str) -> String {
    let mut id = uuid::Uuid::encode_buffer();
    concat(&[
        prefix,
        WAKE_NAME,
        uuid::Uuid::new_v4().simple().encode_lower(&mut id),
    ])
}

/// The record key and the lock key of idempotency key `idempotency_key` (as the application
/// passes it, without the prefix) under `prefix`: `<prefix>__idem__{<tag>}rec:<key>` holds the
/// stored record (JSON), `<prefix>__idem__{<tag>}lock:<key>` the lock of its running first
/// call. `<tag>` is a short hash tag derived from the idempotency key alone, so both keys share
/// one Redis Cluster slot (the record is written by a script that checks the lock), whatever
/// `prefix` and `key` contain: the first `{` of either key is in the common part before the
/// tag's `}`.
///
/// ```
/// let (record, lock) = lockcore::keyspace::idempotency_keys("lock:", "order:req:9f2c");
/// assert!(record.starts_with("lock:__idem__{") && record.ends_with("}rec:order:req:9f2c"));
/// assert!(lock.starts_with("lock:__idem__{") && lock.ends_with("}lock:order:req:9f2c"));
/// ```
pub fn idempotency_keys(prefix: &str, idempotency_key: &str) -> (String, String) {
    let tag = slot::tag_for(idempotency_key);
    let named = |kind: &str| {
        concat(&[
            prefix,
            IDEMPOTENCY_NAME,
            "{",
            tag,
            "}",
            kind,
            idempotency_key,
        ])
    };
    (named(IDEMPOTENCY_RECORD), named(IDEMPOTENCY_LOCK))
}

/// The idempotency key of `key` (full key, prefix included) when it is an idempotency record
/// key or its lock key (see [`idempotency_keys`]); `None` for any other key.
///
/// ```
/// let (record, lock) = lockcore::keyspace::idempotency_keys("lock:", "order:req:9f2c");
/// assert_eq!(lockcore::keyspace::idempotency_key_of("lock:", &record), Some("order:req:9f2c"));
/// assert_eq!(lockcore::keyspace::idempotency_key_of("lock:", &lock), Some("order:req:9f2c"));
/// assert_eq!(lockcore::keyspace::idempotency_key_of("lock:", "lock:order:1"), None);
/// ```
pub fn idempotency_key_of<'k>(prefix: &str, key: &'k str) -> Option<&'k str> {
    let tagged = key
        .strip_prefix(prefix)?
        .strip_prefix(IDEMPOTENCY_NAME)?
        .strip_prefix('{')?;
    let (_, rest) = tagged.split_once('}')?;
    rest.strip_prefix(IDEMPOTENCY_RECORD)
        .or_else(|| rest.strip_prefix(IDEMPOTENCY_LOCK))
}

/// Whether `key` (full key, prefix included) is under `prefix` and is no lock: one of the
/// library's auxiliary keys (a fencing counter, a waiter queue or its entries, an idempotency
/// record, a share set) of this manager or of a manager with a longer prefix. A key is
/// auxiliary when its full name holds a reserved segment (`__fencing_counter__`, `__waitq__`,
/// `__waiters__`, `__shares__`, `__idem__`, `__wake__`) anywhere: lock keys can never hold one, whatever their prefix.
///
/// ```
/// use lockcore::keyspace::is_auxiliary_key;
///
/// assert!(is_auxiliary_key("lock:", "lock:__fencing_counter__"));
/// assert!(is_auxiliary_key("lock:", "lock:sub:__fencing_counter__"));
/// assert!(!is_auxiliary_key("lock:", "lock:order:1"));
/// assert!(!is_auxiliary_key("lock:", "other:__fencing_counter__"));
/// ```
pub fn is_auxiliary_key(prefix: &str, key: &str) -> bool {
    key.starts_with(prefix) && reserved_segment(key).is_some()
}

/// The segments that mark lockcore's own names (fencing counters, waiter queues and entries,
/// wake-up channels, idempotency records). Every auxiliary key and channel holds one right
/// after its manager's prefix; no lock key holds one anywhere, whatever its prefix, so no
/// manager (with a nested prefix, or none) can take another manager's auxiliary keys.
pub(crate) const RESERVED: [&str; 6] = [
    COUNTER_NAME,
    SHARES_NAME,
    QUEUE_NAME,
    ENTRIES_NAME,
    IDEMPOTENCY_NAME,
    WAKE_SEGMENT,
];

/// The wake-up channels' name ([`WAKE_NAME`]) without its `:`.
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
/// for lockcore's own keys: `__fencing_counter__`, `__waitq__`, `__waiters__`, `__shares__`,
/// `__idem__`, `__wake__`.
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
        assert!(WAKE_NAME.starts_with(WAKE_SEGMENT));
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
                    crate::transport::slot::key_hash_slot(record.as_bytes()),
                    crate::transport::slot::key_hash_slot(lock.as_bytes()),
                    "{record} / {lock}"
                );
                assert_eq!(idempotency_key_of(prefix, &record), Some(key));
                assert_eq!(idempotency_key_of(prefix, &lock), Some(key));
                let name = record.strip_prefix(prefix).unwrap_or_default();
                assert_eq!(reserved_segment(name), Some(IDEMPOTENCY_NAME), "{record}");
            }
        }
        let (record, lock) = idempotency_keys("lock:", "req:1");
        let tag = crate::transport::slot::tag_for("req:1");
        assert_eq!(record, format!("lock:__idem__{{{tag}}}rec:req:1"));
        assert_eq!(lock, format!("lock:__idem__{{{tag}}}lock:req:1"));
        assert_eq!(idempotency_key_of("lock:", "lock:order:1"), None);
        assert_eq!(idempotency_key_of("lock:", "lock:__idem__rec:req:1"), None);
    }

    #[test]
    fn per_slot_counter_shares_the_lock_keys_slot() {
        for key in ["lock:order:1", "lock:{user:7}:cart", "lock:caf\u{e9}", "x"] {
            let counter = counter_key("lock:", key, FencingCounter::PerSlot);
            assert_eq!(
                crate::transport::slot::key_hash_slot(counter.as_bytes()),
                crate::transport::slot::key_hash_slot(key.as_bytes()),
                "{key}"
            );
        }
    }

    #[test]
    fn counter_names_are_unchanged() {
        assert_eq!(
            counter_key("lock:", "lock:a", FencingCounter::PerPrefix),
            "lock:__fencing_counter__"
        );
        let tag = crate::transport::slot::tag_for("lock:a");
        assert_eq!(
            counter_key("lock:", "lock:a", FencingCounter::PerSlot),
            format!("lock:__fencing_counter__{{{tag}}}")
        );
        assert_eq!(
            counter_key("lock:", "lock:a", FencingCounter::Off),
            "lock:a"
        );
    }

    #[test]
    fn per_prefix_counter_is_one_key() {
        assert_eq!(
            counter_key("lock:", "lock:a", FencingCounter::PerPrefix),
            counter_key("lock:", "lock:b", FencingCounter::PerPrefix)
        );
    }

    #[test]
    fn auxiliary_keys_are_recognised() {
        let (queue, entries) = waiter_queue_keys("lock:", "lock:order:1");
        assert!(entries.contains("__waiters__"));
        for key in [queue.as_str(), entries.as_str(), "lock:__fencing_counter__"] {
            assert!(is_auxiliary_key("lock:", key), "{key}");
        }
        assert!(!is_auxiliary_key("lock:", "lock:order:1"));
        assert!(!is_auxiliary_key("lock:", "other:__waitq__x"));
        // A manager with a nested prefix: its auxiliary keys are no locks of the outer one.
        let (queue, entries) = waiter_queue_keys("lock:sub:", "lock:sub:order:1");
        for key in [queue.as_str(), entries.as_str(), "lock:sub:__idem__rec:1"] {
            assert!(is_auxiliary_key("lock:", key), "{key}");
            assert!(is_auxiliary_key("", key), "{key}");
        }
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

    fn names_of(prefix: &str, lock_key: &str) -> Vec<String> {
        let (queue, entries) = waiter_queue_keys(prefix, lock_key);
        let name = &lock_key[prefix.len()..];
        let (record, lock) = idempotency_keys(prefix, name);
        vec![
            counter_key(prefix, lock_key, FencingCounter::PerPrefix),
            counter_key(prefix, lock_key, FencingCounter::PerSlot),
            queue,
            entries,
            wake_channel(prefix),
            record,
            lock,
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
