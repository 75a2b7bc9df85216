//! The scheduled-job example: three worker processes with schedules offset by 0, 150 and
//! 300 ms run the job once per period with `hold_at_least_ms`, and every late worker runs it
//! again in the twin without it. The example counts the runs and checks them itself; this
//! test reads its counts.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod support;

use support::{field, last_line};

#[test]
fn with_the_minimum_the_job_runs_once_per_period() {
    let line = last_line("scheduled_job", &["--periods=3"]);
    assert_eq!(field(&line, "hold"), "on");
    assert_eq!(field(&line, "runs"), "3", "{line}");
    assert!(line.ends_with("per_period=[1, 1, 1]"), "{line}");
}

#[test]
fn without_the_minimum_late_workers_run_it_again() {
    let line = last_line("scheduled_job", &["--periods=3", "--no-hold"]);
    assert_eq!(field(&line, "hold"), "off");
    let runs: u32 = field(&line, "runs").parse().unwrap();
    assert!(
        runs > 3,
        "the job ran only {runs} times in 3 periods: {line}"
    );
}
