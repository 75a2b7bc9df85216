//! The unit tests of the benchmark's pure parts: the `MONITOR` line classifier and the histogram.
//! The bench target runs without a test harness, so they live here, with those modules compiled
//! into this test crate: `cargo test -p lockcore-benches`.

// The bench target uses every item; this crate uses only what the tests touch.
#![allow(dead_code, unreachable_pub)]

#[path = "../src/monitor_line.rs"]
mod monitor_line;
#[path = "../src/stats.rs"]
mod stats;

use std::time::Duration;

use monitor_line::{Line, classify_line};
use stats::Hist;

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
