//! The `MONITOR` stream: one parser for its lines, and a blocking reader of the stream.
//!
//! A line looks like `+1700000000.123456 [0 127.0.0.1:50000] "SET" "k" ...` for a command a
//! client sent, and `+1700000000.123456 [0 lua] "GET" "k"` for a call a Lua script made.
//! `INFO commandstats` counts both, so only `MONITOR` tells requests from script-internal work.

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::TcpStream;
use std::time::Duration;

/// Who ran a command seen on `MONITOR`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A Lua script, through `redis.call` (`[0 lua]`).
    Lua,
    /// A client connection.
    Client,
}

/// One parsed `MONITOR` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MonitorLine {
    /// Who ran it.
    pub source: Source,
    /// The command name, upper-cased.
    pub command: String,
    /// The rest of the line after the command name (its quoted arguments), as text.
    pub args: String,
}

/// Parses one `MONITOR` line; `None` for anything else (`+OK`, an empty line).
pub fn parse_line(line: &[u8]) -> Option<MonitorLine> {
    let open = line.iter().position(|&b| b == b'[')?;
    let close = open + line[open..].iter().position(|&b| b == b']')?;
    let source = &line[open + 1..close];
    let rest = &line[close + 1..];
    let q1 = rest.iter().position(|&b| b == b'"')?;
    let q2 = q1 + 1 + rest[q1 + 1..].iter().position(|&b| b == b'"')?;
    Some(MonitorLine {
        source: if source.ends_with(b" lua") {
            Source::Lua
        } else {
            Source::Client
        },
        command: String::from_utf8_lossy(&rest[q1 + 1..q2]).to_ascii_uppercase(),
        args: String::from_utf8_lossy(&rest[q2 + 1..]).trim().to_owned(),
    })
}

/// A blocking `MONITOR` connection (for a `spawn_blocking` task or a thread of its own).
#[derive(Debug)]
pub struct MonitorStream {
    lines: BufReader<TcpStream>,
    line: String,
}

impl MonitorStream {
    /// Connects to `127.0.0.1:port`, sends `MONITOR` and checks its `+OK`; every later read
    /// gives up after `read_timeout`. Panics on failure (a test harness).
    pub fn connect(port: u16, read_timeout: Duration) -> MonitorStream {
        let mut stream = TcpStream::connect(("127.0.0.1", port))
            .unwrap_or_else(|e| panic!("MONITOR connection: {e}"));
        stream
            .set_read_timeout(Some(read_timeout))
            .unwrap_or_else(|e| panic!("{e}"));
        stream
            .write_all(b"MONITOR\r\n")
            .unwrap_or_else(|e| panic!("{e}"));
        let mut lines = BufReader::new(stream);
        let mut line = String::new();
        lines.read_line(&mut line).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(line.trim_end(), "+OK", "MONITOR reply");
        MonitorStream { lines, line }
    }

    /// The next raw line, or `None` when the stream ended or a read timed out.
    pub fn next_raw(&mut self) -> Option<&str> {
        self.line.clear();
        match self.lines.read_line(&mut self.line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(&self.line),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_split_by_source() {
        let client = parse_line(b"+1.2 [0 127.0.0.1:5] \"EVALSHA\" \"ab\" \"1\"\r\n");
        assert!(
            matches!(&client, Some(l) if l.source == Source::Client && l.command == "EVALSHA"),
            "{client:?}"
        );
        let lua = parse_line(b"+1.2 [0 lua] \"set\" \"k\"\r\n");
        assert!(
            matches!(&lua, Some(l) if l.source == Source::Lua && l.command == "SET"),
            "{lua:?}"
        );
        let echo = parse_line(b"+1.2 [0 127.0.0.1:5] \"ECHO\" \"mark-17\"\r\n");
        assert_eq!(echo.map(|l| l.args), Some("\"mark-17\"".to_owned()));
        assert!(parse_line(b"+OK\r\n").is_none());
    }
}
