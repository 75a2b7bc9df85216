//! Classifying one line of the `MONITOR` stream (see `monitor`) for the benchmark's windows: a
//! window mark, a script-internal call, or a command a client sent. The line parser itself is
//! the harness's (`lockcore_tests::monitor`).

use lockcore_tests::monitor::{Source, parse_line};

/// The `ECHO` text that marks a window edge; the mark's number follows it.
pub(crate) const MARK_PREFIX: &str = "lockcore-bench-mark-";

/// What one `MONITOR` line is.
pub(crate) enum Line {
    /// An `ECHO` of a window mark, with its number.
    Mark(u64),
    /// A call a Lua script made.
    Lua,
    /// A command a client sent, upper-cased.
    Client(String),
}

/// `+1700000000.123456 [0 127.0.0.1:50000] "SET" "k" ...` or `... [0 lua] "GET" "k"`.
pub(crate) fn classify_line(line: &[u8]) -> Option<Line> {
    let parsed = parse_line(line)?;
    if parsed.source == Source::Lua {
        return Some(Line::Lua);
    }
    if parsed.command == "INFO" {
        // Our own `INFO stats` at each mark; no implementation under test sends INFO.
        return None;
    }
    if parsed.command == "ECHO"
        && let Some(pos) = parsed.args.find(MARK_PREFIX)
    {
        let digits: String = parsed.args[pos + MARK_PREFIX.len()..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        if let Ok(id) = digits.parse() {
            return Some(Line::Mark(id));
        }
    }
    Some(Line::Client(parsed.command))
}
