//! The unit tests of the benchmark's pure parts: the `MONITOR` line classifier, the histogram
//! and the report's table.
//! The bench target runs without a test harness, so they live here, with those modules compiled
//! into this test crate: `cargo test -p lockcore-benches`.

// The bench target uses every item; this crate uses only what the tests touch.
#![allow(dead_code, unreachable_pub)]

#[path = "../src/monitor_line.rs"]
mod monitor_line;
#[path = "../src/stats.rs"]
mod stats;
#[path = "../src/table.rs"]
mod table;

use std::time::Duration;

use monitor_line::{Line, classify_line};
use stats::Hist;
use table::Table;

#[test]
fn lines_are_split_by_source() {
    assert!(matches!(
        classify_line(b"+1.2 [0 127.0.0.1:5] \"EVALSHA\" \"ab\" \"1\"\r\n"),
        Some(Line::Client(n)) if n == "EVALSHA"
    ));
    assert!(matches!(
        classify_line(b"+1.2 [0 lua] \"SET\" \"k\"\r\n"),
        Some(Line::Lua)
    ));
    assert!(matches!(
        classify_line(b"+1.2 [0 127.0.0.1:5] \"ECHO\" \"lockcore-bench-mark-17\"\r\n"),
        Some(Line::Mark(17))
    ));
    assert!(classify_line(b"+OK\r\n").is_none());
}

#[test]
fn hist_quantiles() {
    let mut h = Hist::new();
    for us in 1..=100 {
        h.record(Duration::from_micros(us));
    }
    let p50 = h.p50().map(|d| d.as_micros());
    assert!(matches!(p50, Some(49..=51)), "{p50:?}");
    assert_eq!(h.len(), 100);
}

#[test]
fn table_renders_markdown() {
    let mut t = Table::new("implementation | p50 | errors");
    t.push_row(["floor", "48.1 µs", "0"]);
    t.push_row(["a|b", "1.0 µs"]);
    t.push_failed("rlock", "refused\nby the server");
    let mut out = String::new();
    t.render(&mut out);
    assert_eq!(
        out,
        "| implementation | p50 | errors |\n\
         | --- | --- | --- |\n\
         | floor | 48.1 µs | 0 |\n\
         | a/b | 1.0 µs |  |\n\
         | rlock | n/a: refused by the server |  |\n\n"
    );
}
