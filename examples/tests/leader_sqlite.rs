//! The leader example: the leader is frozen (SIGSTOP) between its check and its write, past its
//! lease; a new leader is elected with a larger term; resumed, the old leader's heartbeat is
//! refused by SQLite's term check, and lands in the unfenced twin.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod support;

use support::{field, last_line};

fn terms(line: &str) -> (u64, u64) {
    (
        field(line, "old_term").parse().unwrap(),
        field(line, "new_term").parse().unwrap(),
    )
}

#[test]
fn the_deposed_leaders_heartbeat_is_refused_by_its_term() {
    let line = last_line("leader_sqlite", &[]);
    let (old, new) = terms(&line);
    assert!(new > old, "{line}");
    assert_eq!(field(&line, "stale_refused"), "1", "{line}");
    assert_eq!(field(&line, "stale_landed"), "0", "{line}");
}

#[test]
fn unfenced_the_deposed_leaders_heartbeat_lands_after_the_new_leaders() {
    let line = last_line("leader_sqlite", &["--unfenced"]);
    let (old, new) = terms(&line);
    assert!(new > old, "{line}");
    assert_eq!(field(&line, "stale_refused"), "0", "{line}");
    assert_ne!(field(&line, "stale_landed"), "0", "{line}");
}
