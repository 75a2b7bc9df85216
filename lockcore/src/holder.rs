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
//! `acquired_at` is the wall-clock time at which the lock was taken: the client's clock when
//! the value is minted, just before the attempt that takes a free key; the Redis server's clock
//! (`TIME`) when a queued waiter gets the key, by a hand-over's grant or by its own re-check:
//! the script then stores the value with `acquired_at` replaced, and the guard holds the stored
//! value ([`LockGuard::stored_value`](crate::LockGuard::stored_value)).
//!
//! The static part (host, pid, label) is encoded once per manager; an acquire adds the token,
//! the time and the template.

use std::cell::RefCell;
use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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
pub fn waiter_queue_keys(prefix: &str, lock_key: &str) -> (String, String) {
    crate::handoff::queue_keys(prefix, lock_key)
}

/// The deadline (ms since the Unix epoch, by the Redis server's clock) until which the waiter
/// whose entry is `entry` counts as live; `None` for a malformed entry.
///
/// ```
/// assert_eq!(lockcore::holder::entry_deadline_ms("1764579600123|10000|2|500|5|lock:c"), Some(1764579600123));
/// assert_eq!(lockcore::holder::entry_deadline_ms("garbage"), None);
/// ```
pub fn entry_deadline_ms(entry: &str) -> Option<u64> {
    entry.split_once('|')?.0.parse().ok()
}

/// The record key and the lock key of idempotency key `idempotency_key` (as the application
/// passes it, without the prefix) under `prefix`: `<prefix>__idem__{<tag>}rec:<key>` holds the
/// stored record (JSON), `<prefix>__idem__{<tag>}lock:<key>` the lock of its running first
/// call. `<tag>` is a short Redis Cluster hash tag derived from the idempotency key, so that
/// both keys share one cluster slot.
///
/// ```
/// let (record, lock) = lockcore::holder::idempotency_keys("lock:", "order:req:9f2c");
/// assert!(record.starts_with("lock:__idem__{") && record.ends_with("}rec:order:req:9f2c"));
/// assert!(lock.starts_with("lock:__idem__{") && lock.ends_with("}lock:order:req:9f2c"));
/// ```
pub fn idempotency_keys(prefix: &str, idempotency_key: &str) -> (String, String) {
    crate::key::idempotency_keys(prefix, idempotency_key)
}

/// The idempotency key of `key` (full key, prefix included) when it is an idempotency record
/// key or its lock key (see [`idempotency_keys`]); `None` for any other key.
///
/// ```
/// let (record, lock) = lockcore::holder::idempotency_keys("lock:", "order:req:9f2c");
/// assert_eq!(lockcore::holder::idempotency_key_of("lock:", &record), Some("order:req:9f2c"));
/// assert_eq!(lockcore::holder::idempotency_key_of("lock:", &lock), Some("order:req:9f2c"));
/// assert_eq!(lockcore::holder::idempotency_key_of("lock:", "lock:order:1"), None);
/// ```
pub fn idempotency_key_of<'k>(prefix: &str, key: &'k str) -> Option<&'k str> {
    crate::key::idempotency_key_of(prefix, key)
}

/// Whether `key` (full key, prefix included) is under `prefix` and is no lock: one of the
/// library's auxiliary keys (a fencing counter, a waiter queue or waiter key, an idempotency
/// record) of this manager or of a manager with a longer prefix. A key is auxiliary when its
/// full name holds a reserved segment (`__fencing_counter__`, `__waitq__`, `__waiters__`,
/// `__idem__`, `__wake__`) anywhere: lock keys can never hold one, whatever their prefix.
///
/// ```
/// use lockcore::holder::is_auxiliary_key;
///
/// assert!(is_auxiliary_key("lock:", "lock:__fencing_counter__"));
/// assert!(is_auxiliary_key("lock:", "lock:sub:__fencing_counter__"));
/// assert!(!is_auxiliary_key("lock:", "lock:order:1"));
/// assert!(!is_auxiliary_key("lock:", "other:__fencing_counter__"));
/// ```
pub fn is_auxiliary_key(prefix: &str, key: &str) -> bool {
    key.starts_with(prefix) && crate::key::reserved_segment(key).is_some()
}

/// The token part of a lock value minted by this crate.
pub(crate) fn token_of(value: &str) -> &str {
    split_value(value).0
}

/// The per-manager, precomputed part of every lock value.
#[derive(Debug, Clone)]
pub(crate) struct HolderStamp {
    /// `{"host":"..","pid":N[,"label":".."],"acquired_at":`: everything before the time, so
    /// that a mint appends only the token, the time, the template and the closing brace.
    head: String,
}

/// The field after the static part; the time follows it.
const ACQUIRED_AT: &str = ",\"acquired_at\":";
/// The optional field after the time.
const KEY_TEMPLATE: &str = ",\"key_template\":";
/// The most digits of a `u64`.
const U64_DIGITS: usize = 20;
/// The most digits of `acquired_at`: a `u64` of seconds and three of milliseconds.
const MILLIS_DIGITS: usize = U64_DIGITS + 3;

impl HolderStamp {
    /// The stamp of this process, with an optional label.
    pub(crate) fn new(label: Option<&str>) -> Self {
        let host = gethostname::gethostname();
        let mut head = String::with_capacity(64);
        head.push_str("{\"host\":");
        push_json_str(&mut head, &host.to_string_lossy());
        head.push_str(",\"pid\":");
        push_u64(&mut head, u64::from(std::process::id()));
        if let Some(label) = label {
            head.push_str(",\"label\":");
            push_json_str(&mut head, label);
        }
        head.push_str(ACQUIRED_AT);
        HolderStamp { head }
    }

    /// A fresh lock value: a new random token and this stamp, timed now.
    ///
    /// One allocation of the exact size (unless the template needs JSON escapes) and no
    /// formatting machinery: the token is hex-encoded by `uuid`, the time by [`push_millis`].
    pub(crate) fn mint(&self, key_template: Option<&str>) -> String {
        let template_len = key_template.map_or(0, |t| KEY_TEMPLATE.len() + t.len() + 2);
        let mut value = String::with_capacity(
            TOKEN_LEN + 1 + self.head.len() + MILLIS_DIGITS + template_len + 1,
        );
        let mut buf = uuid::Uuid::encode_buffer();
        value.push_str(uuid::Uuid::new_v4().hyphenated().encode_lower(&mut buf));
        value.push(' ');
        value.push_str(&self.head);
        push_millis(&mut value, since_epoch());
        if let Some(template) = key_template {
            value.push_str(KEY_TEMPLATE);
            push_json_str(&mut value, template);
        }
        value.push('}');
        value
    }
}

/// `"00"` to `"99"`, for two digits per division.
const PAIRS: &[u8; 200] = b"\
    0001020304050607080910111213141516171819\
    2021222324252627282930313233343536373839\
    4041424344454647484950515253545556575859\
    6061626364656667686970717273747576777879\
    8081828384858687888990919293949596979899";

/// Appends `n` in decimal (what `Display` writes), without `core::fmt`: two digits per step.
fn push_u64(out: &mut String, mut n: u64) {
    let mut digits = [b'0'; U64_DIGITS];
    let mut start = U64_DIGITS;
    while n >= 100 {
        // `n % 100` < 100: the cast cannot truncate.
        let pair = (n % 100) as usize * 2;
        n /= 100;
        start -= 2;
        digits[start..start + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    }
    if n >= 10 {
        let pair = n as usize * 2;
        start -= 2;
        digits[start..start + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    } else {
        start -= 1;
        digits[start] = b'0' + n as u8;
    }
    // ASCII digits only: always valid UTF-8.
    if let Ok(digits) = std::str::from_utf8(&digits[start..]) {
        out.push_str(digits);
    }
}

thread_local! {
    /// The whole seconds of the last time this thread minted, and their decimal digits: they
    /// change once a second, so most mints copy them and write only the three millisecond
    /// digits.
    static SECONDS: RefCell<(u64, String)> = const { RefCell::new((0, String::new())) };
}

/// Appends `since_epoch` in whole milliseconds, in decimal: the seconds' digits, then the
/// milliseconds as three digits (the same text as `since_epoch.as_millis()` written by
/// `Display`).
fn push_millis(out: &mut String, since_epoch: Duration) {
    let secs = since_epoch.as_secs();
    let millis = since_epoch.subsec_millis();
    if secs == 0 {
        // No leading zeros: `0`..`999`.
        push_u64(out, u64::from(millis));
        return;
    }
    let cached = SECONDS.try_with(|cell| {
        let mut cell = cell.borrow_mut();
        let (cached_secs, digits) = &mut *cell;
        if *cached_secs != secs || digits.is_empty() {
            digits.clear();
            push_u64(digits, secs);
            *cached_secs = secs;
        }
        out.push_str(digits);
    });
    if cached.is_err() {
        // The thread is being torn down (its locals are gone).
        push_u64(out, secs);
    }
    // `millis` < 1000: three digits, each < 10.
    for digit in [millis / 100, millis / 10 % 10, millis % 10] {
        out.push(char::from(b'0' + digit as u8));
    }
}

/// Wall-clock time since the Unix epoch (zero for a clock set before 1970).
fn since_epoch() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
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

    /// The value is byte for byte what the `format!`-based encoder wrote (lockctl parses it).
    #[test]
    fn value_bytes_match_the_formatted_layout() {
        let host = gethostname::gethostname().to_string_lossy().into_owned();
        let json = |s: &str| serde_json::to_string(s).unwrap();
        for (label, template) in [
            (None, None),
            (Some("orders"), None),
            (None, Some("order:lock:product:<product_id>")),
            (Some("a \"b\"\n\\"), Some("t\u{1}<id>")),
        ] {
            let value = HolderStamp::new(label).mint(template);
            let (token, meta) = split_value(&value);
            let meta = meta.unwrap();
            let at: serde_json::Value = serde_json::from_str(meta).unwrap();
            let at = at["acquired_at"].as_u64().unwrap();
            let mut expected = format!("{{\"host\":{},\"pid\":{}", json(&host), std::process::id());
            if let Some(label) = label {
                expected += &format!(",\"label\":{}", json(label));
            }
            expected += &format!(",\"acquired_at\":{at}");
            if let Some(template) = template {
                expected += &format!(",\"key_template\":{}", json(template));
            }
            expected.push('}');
            assert_eq!(meta, expected);
            assert_eq!(value, format!("{token} {expected}"));
        }
    }

    #[test]
    fn integers_are_written_in_decimal() {
        for n in [
            0,
            7,
            9,
            10,
            42,
            99,
            100,
            101,
            999,
            1000,
            12_345,
            1_764_579_600_123,
            u64::MAX,
        ] {
            let mut out = String::from("x");
            push_u64(&mut out, n);
            assert_eq!(out, format!("x{n}"));
        }
    }

    #[test]
    fn milliseconds_are_written_as_display_writes_them() {
        for ms in [
            0u64,
            5,
            999,
            1000,
            1001,
            1099,
            1_764_579_600_000,
            1_764_579_600_007,
            1_764_579_600_123,
            1_764_579_601_999,
        ] {
            let mut out = String::new();
            push_millis(&mut out, Duration::from_millis(ms));
            assert_eq!(out, ms.to_string());
        }
        // Past u64 milliseconds: still the u128 decimal of `as_millis`.
        let far = Duration::new(u64::MAX, 999_999_999);
        let mut out = String::new();
        push_millis(&mut out, far);
        assert_eq!(out, far.as_millis().to_string());
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
