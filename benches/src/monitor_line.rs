//! Parsing one line of the `MONITOR` stream (see `monitor`): a window mark, a script-internal
//! call, or a command a client sent.

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
pub(crate) fn parse_line(line: &[u8]) -> Option<Line> {
    let open = line.iter().position(|&b| b == b'[')?;
    let close = open + line[open..].iter().position(|&b| b == b']')?;
    let source = &line[open + 1..close];
    let rest = &line[close + 1..];
    let q1 = rest.iter().position(|&b| b == b'"')?;
    let q2 = q1 + 1 + rest[q1 + 1..].iter().position(|&b| b == b'"')?;
    let name = String::from_utf8_lossy(&rest[q1 + 1..q2]).to_ascii_uppercase();
    if source.ends_with(b" lua") {
        return Some(Line::Lua);
    }
    if name == "INFO" {
        // Our own `INFO stats` at each mark; no implementation under test sends INFO.
        return None;
    }
    if name == "ECHO" {
        let arg = &rest[q2 + 1..];
        let text = String::from_utf8_lossy(arg);
        if let Some(pos) = text.find(MARK_PREFIX) {
            let digits: String = text[pos + MARK_PREFIX.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            if let Ok(id) = digits.parse() {
                return Some(Line::Mark(id));
            }
        }
    }
    Some(Line::Client(name))
}
