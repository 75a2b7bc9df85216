//! Text from Redis made inert for a terminal: a key, a token or a holder's label may come from
//! request data or from whoever can write under the prefix, and must never clear the screen,
//! move the cursor or forge a table row. Every human-readable output shows such text through
//! [`text`] or [`bytes`]; `--json` keeps it exact.

use std::borrow::Cow;
use std::fmt::Write as _;

/// `text` with every character that `{:?}` escapes (control characters, invisible and
/// direction-changing ones, grapheme extenders, the backslash) escaped as `{:?}` escapes it:
/// `"a\x1b[2J\n"` → `a\u{1b}[2J\n`. Quotes are kept as they are.
pub(crate) fn text(text: &str) -> Cow<'_, str> {
    if text.chars().all(shown_as_is) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    push_text(&mut out, text);
    Cow::Owned(out)
}

/// `bytes` as [`text`] shows it, with each byte that is not part of valid UTF-8 as `\xNN`.
pub(crate) fn bytes(bytes: &[u8]) -> Cow<'_, str> {
    if let Ok(valid) = std::str::from_utf8(bytes) {
        return text(valid);
    }
    let mut out = String::with_capacity(bytes.len() + 16);
    for chunk in bytes.utf8_chunks() {
        push_text(&mut out, chunk.valid());
        for byte in chunk.invalid() {
            let _ = write!(out, "\\x{byte:02x}");
        }
    }
    Cow::Owned(out)
}

/// A character `{:?}` leaves alone (quotes aside, which it escapes only inside its own quotes).
fn shown_as_is(c: char) -> bool {
    c == '"' || c == '\'' || c.escape_debug().len() == 1
}

fn push_text(out: &mut String, text: &str) {
    for c in text.chars() {
        if shown_as_is(c) {
            out.push(c);
        } else {
            out.extend(c.escape_debug());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_escaped_as_debug_escapes_them() {
        assert_eq!(text("order:42"), "order:42");
        assert!(matches!(text("café \"q\" 'x'"), Cow::Borrowed(_)));
        assert_eq!(
            text("\x1b[2J\x1b[H\n<row>\r\t\x07\x7f\u{85}\u{202e}\\"),
            "\\u{1b}[2J\\u{1b}[H\\n<row>\\r\\t\\u{7}\\u{7f}\\u{85}\\u{202e}\\\\"
        );
        assert_eq!(text("cafe\u{301}"), "cafe\\u{301}");
    }

    #[test]
    fn bytes_that_are_not_utf8_are_hex_escaped() {
        assert_eq!(bytes(b"lock:a"), "lock:a");
        assert_eq!(bytes(b"a\xff\x1b\xe2\x82"), "a\\xff\\u{1b}\\xe2\\x82");
        assert_eq!(bytes("é\n".as_bytes()), "é\\n");
    }
}
