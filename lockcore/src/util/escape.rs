//! Keys as this crate's messages and `tracing` fields show them: a key may be rendered from
//! request data, and a log viewer or terminal must never act on it.

use std::fmt;

/// Shows a key (or any text from outside) with every character that `{:?}` escapes (control
/// characters, invisible and direction-changing ones, grapheme extenders, the backslash)
/// written as `{:?}` writes it, `"a\x1b[2J\n"` → `a\u{1b}[2J\n`, and quotes as they are. The
/// key itself (in Redis, in an error's `key` field) is never changed.
#[derive(Clone, Copy)]
pub(crate) struct Escaped<'a>(pub(crate) &'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Most keys need no escape: one scan, one write.
        let first = self.0.char_indices().find(|&(_, c)| !plain(c));
        let Some((start, _)) = first else {
            return f.write_str(self.0);
        };
        f.write_str(&self.0[..start])?;
        for c in self.0[start..].chars() {
            if plain(c) {
                fmt::Write::write_char(f, c)?;
            } else {
                write!(f, "{}", c.escape_debug())?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Written as it is: everything `{:?}` leaves alone, and quotes.
fn plain(c: char) -> bool {
    c.is_ascii_graphic() && c != '\\' || c == ' ' || c.escape_debug().len() == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_escaped_and_plain_text_is_kept() {
        for (key, shown) in [
            ("order:42", "order:42"),
            ("café \"q\" 'x' {7}", "café \"q\" 'x' {7}"),
            (
                "lock:\x1b[2J\x1b[H\n<row>\r\t\x07\x7f\u{85}\u{202e}\\",
                "lock:\\u{1b}[2J\\u{1b}[H\\n<row>\\r\\t\\u{7}\\u{7f}\\u{85}\\u{202e}\\\\",
            ),
            ("cafe\u{301}", "cafe\\u{301}"),
            ("", ""),
        ] {
            assert_eq!(Escaped(key).to_string(), shown, "{key:?}");
        }
    }
}
