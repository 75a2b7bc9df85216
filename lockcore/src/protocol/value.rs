//! [`LockValue`]: the value a lock key holds (a token, then the holder metadata), and the
//! per-manager [`HolderStamp`] that mints them. The format is described in
//! [`keyspace`](crate::protocol::keyspace).

use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::protocol::keyspace::{self, TOKEN_LEN};

/// The value stored at a lock key: its token (the random 128-bit UUID its holder is recognised
/// by), a space, and the holder metadata. Minted by [`HolderStamp::mint`]; a hand-over stores
/// it with `acquired_at` stamped, and the holder then keeps the stored value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LockValue(String);

impl LockValue {
    /// A value Redis holds (read back from a script's reply or a hand-over's wake-up).
    pub(crate) fn stored(value: String) -> Self {
        LockValue(value)
    }

    /// The whole value.
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// The token: the value's first word.
    pub(crate) fn token(&self) -> &str {
        keyspace::token_of(&self.0)
    }

    /// The share this value holds, if it is a share's value (its kind ends its metadata).
    pub(crate) fn share(&self) -> Option<Share> {
        share_of(&self.0)
    }

    /// What a renewal or an extend sends for this lease: the token of a plain lock, the whole
    /// value of a share (its kind tells the backend where the lease lives).
    pub(crate) fn renew_arg(&self) -> &str {
        if self.share().is_some() {
            &self.0
        } else {
            self.token()
        }
    }
}

/// What a lease holds beside a plain lock: one share of its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Share {
    /// One permit of a semaphore of this many permits.
    Permits(u32),
    /// One reader's share of a read-write lock.
    Read,
}

impl Share {
    /// The end of the metadata of a share's value: its kind, as the scripts read it.
    fn suffix(self) -> String {
        match self {
            Share::Permits(n) => format!("{PERMITS}{n}}}"),
            Share::Read => READ.to_owned(),
        }
    }

    /// The kind as a share marker names it (`"permits":5`, `"mode":"read"`), read back.
    pub(crate) fn from_kind(kind: &str) -> Option<Share> {
        share_of(&format!(",{kind}}}"))
    }

    /// In words, for errors: `a semaphore of 5 permits`, `a read-write lock's readers`.
    pub(crate) fn describe(self) -> String {
        match self {
            Share::Permits(n) => format!("a semaphore of {n} permits"),
            Share::Read => "a read-write lock's readers".to_owned(),
        }
    }
}

/// A semaphore's value ends with this, then the number of permits and `}`.
const PERMITS: &str = ",\"permits\":";
/// A reader's value ends with this.
const READ: &str = ",\"mode\":\"read\"}";

/// The share a lock value (or a string that may be one: a renewal's argument) holds.
pub(crate) fn share_of(value: &str) -> Option<Share> {
    if value.ends_with(READ) {
        return Some(Share::Read);
    }
    let body = value.strip_suffix('}')?;
    let at = body.rfind(PERMITS)?;
    body[at + PERMITS.len()..].parse().ok().map(Share::Permits)
}

impl redis::ToRedisArgs for LockValue {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        out.write_arg(self.0.as_bytes());
    }
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
/// The most digits of `acquired_at` (a `u128` of milliseconds).
const MILLIS_DIGITS: usize = 39;

impl HolderStamp {
    /// The stamp of this process, with an optional label.
    pub(crate) fn new(label: Option<&str>) -> Self {
        let host = gethostname::gethostname();
        let mut head = String::with_capacity(64);
        head.push_str("{\"host\":");
        push_json_str(&mut head, &host.to_string_lossy());
        head.push_str(",\"pid\":");
        head.push_str(itoa::Buffer::new().format(std::process::id()));
        if let Some(label) = label {
            head.push_str(",\"label\":");
            push_json_str(&mut head, label);
        }
        head.push_str(ACQUIRED_AT);
        HolderStamp { head }
    }

    /// A fresh lock value: a new random token and this stamp, timed now.
    ///
    /// One allocation (unless the template needs JSON escapes) and no formatting machinery:
    /// the token is hex-encoded by `uuid`, the time by `itoa`.
    pub(crate) fn mint(&self, key_template: Option<&str>) -> LockValue {
        self.mint_as(key_template, None)
    }

    /// A fresh lock value of a share (see [`mint`](Self::mint)): its kind ends the metadata.
    pub(crate) fn mint_share(&self, key_template: Option<&str>, share: Share) -> LockValue {
        self.mint_as(key_template, Some(share))
    }

    fn mint_as(&self, key_template: Option<&str>, share: Option<Share>) -> LockValue {
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
        match share {
            None => value.push('}'),
            Some(share) => value.push_str(&share.suffix()),
        }
        LockValue(value)
    }
}

/// Appends `since_epoch` in whole milliseconds, in decimal.
fn push_millis(out: &mut String, since_epoch: Duration) {
    out.push_str(itoa::Buffer::new().format(since_epoch.as_millis()));
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
    use crate::protocol::keyspace::{TOKEN_LEN, split_value};

    #[test]
    fn value_is_token_space_json() {
        let stamp = HolderStamp::new(Some("orders \"blue\"\n"));
        let value = stamp.mint(Some("order:<id>"));
        let (token, meta) = split_value(value.as_str());
        assert_eq!(token.len(), TOKEN_LEN);
        assert!(uuid::Uuid::parse_str(token).is_ok());
        let meta: serde_json::Value = serde_json::from_str(meta.unwrap_or_default()).unwrap();
        assert_eq!(meta["pid"], std::process::id());
        assert_eq!(meta["label"], "orders \"blue\"\n");
        assert_eq!(meta["key_template"], "order:<id>");
        assert!(meta["host"].is_string());
        assert!(meta["acquired_at"].as_u64().unwrap() > 1_600_000_000_000);
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
            let (token, meta) = split_value(value.as_str());
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
            assert_eq!(value.as_str(), format!("{token} {expected}"));
        }
    }

    #[test]
    fn milliseconds_are_written_as_display_writes_them() {
        for ms in [0u64, 5, 999, 1000, 1_764_579_600_123] {
            let mut out = String::new();
            push_millis(&mut out, Duration::from_millis(ms));
            assert_eq!(out, ms.to_string());
        }
        let far = Duration::new(u64::MAX, 999_999_999);
        let mut out = String::new();
        push_millis(&mut out, far);
        assert_eq!(out, far.as_millis().to_string());
    }

    #[test]
    fn a_share_value_carries_its_kind_at_its_end() {
        let stamp = HolderStamp::new(Some("\"permits\":9}"));
        let plain = stamp.mint(Some(",\"mode\":\"read\"}"));
        assert_eq!(plain.share(), None);
        assert_eq!(plain.renew_arg(), plain.token());
        for share in [
            Share::Permits(1),
            Share::Permits(4_000_000_000),
            Share::Read,
        ] {
            let value = stamp.mint_share(Some("pool:<id>"), share);
            assert_eq!(value.share(), Some(share));
            assert_eq!(value.renew_arg(), value.as_str());
            let meta: serde_json::Value =
                serde_json::from_str(split_value(value.as_str()).1.unwrap()).unwrap();
            assert_eq!(meta["key_template"], "pool:<id>");
        }
        assert_eq!(Share::from_kind("\"permits\":5"), Some(Share::Permits(5)));
        assert_eq!(Share::from_kind("\"mode\":\"read\""), Some(Share::Read));
        assert_eq!(Share::from_kind("x"), None);
    }

    #[test]
    fn optional_fields_are_left_out() {
        let value = HolderStamp::new(None).mint(None);
        let meta: serde_json::Value =
            serde_json::from_str(split_value(value.as_str()).1.unwrap()).unwrap();
        assert!(meta.get("label").is_none());
        assert!(meta.get("key_template").is_none());
        assert_ne!(value.token(), HolderStamp::new(None).mint(None).token());
    }
}
