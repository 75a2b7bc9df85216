//! The exhaustive check of the protocol (see `docs/src/model.md`): every interleaving of 2 and
//! 3 clients within the bounds, each property held, the state counts printed.
//! `LOCKCORE_MODEL_DEEP=1` runs deeper configurations (see the chapter for their figures).

use lockcore_model::system::{Config, LockSystem};
use lockcore_model::trace;
use stateright::{Checker, Expectation, Model};

/// Writes a line to the process' stderr directly, so that `cargo test` shows it without
/// `--nocapture` (its capture takes only the `print!` macros).
fn report(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

fn deep() -> bool {
    std::env::var_os("LOCKCORE_MODEL_DEEP").is_some()
}

/// Checks `config` exhaustively and fails with the counterexample's trace when a property does
/// not hold (or a `sometimes` property is never reached); returns the unique states.
fn holds(label: &str, config: Config) -> usize {
    let started = std::time::Instant::now();
    let checker = trace::check(LockSystem { config }, 2);
    let mut failures = Vec::new();
    for property in checker.model().properties() {
        let found = trace::discovery(&checker, property.name);
        match (property.expectation, found) {
            (Expectation::Sometimes, None) => {
                failures.push(format!("{}: never reached", property.name));
            }
            (Expectation::Sometimes, Some(_)) | (_, None) => {}
            (_, Some(trace)) => {
                failures.push(format!("{}: counterexample\n{trace}", property.name));
            }
        }
    }
    report(format_args!(
        "lockcore-model {label}: states={} unique={} depth={} in {:.1?}",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        started.elapsed()
    ));
    assert!(failures.is_empty(), "{label}:\n{}", failures.join("\n"));
    checker.unique_state_count()
}

#[test]
fn two_clients_with_lost_replies_missed_pushes_cancellations_and_crashes() {
    let config = if deep() {
        Config::safety(2)
    } else {
        Config {
            max_lag: 0,
            ..Config::safety(2)
        }
    };
    assert!(holds("safety, 2 clients, 2 faults", config) > 100_000);
}

#[test]
fn two_clients_whose_clocks_drift() {
    let config = Config {
        horizon: if deep() { 8 } else { 7 },
        faults: u8::from(deep()),
        max_lag: 1,
        ..Config::safety(2)
    };
    assert!(holds("safety, 2 clients, drift", config) > 100_000);
}

#[test]
fn three_clients() {
    let config = Config {
        horizon: if deep() { 5 } else { 4 },
        faults: 0,
        max_lag: 0,
        ..Config::safety(3)
    };
    assert!(holds("safety, 3 clients", config) > 10_000);
}

#[test]
fn every_waiter_is_granted_under_fair_scheduling_even_past_a_missed_push() {
    let rounds = if deep() { 3 } else { 2 };
    assert!(holds("liveness, 3 clients", Config::liveness(3, rounds, 1)) > 100);
}

#[test]
fn a_lost_push_without_re_checks_is_caught_by_the_liveness_bound() {
    // The liveness bound can fail: with the refresh timer pushed past the bound, a missed push
    // leaves its waiter parked, and the check reports it.
    let mut config = Config::liveness(2, 1, 1);
    if let Some(fair) = &mut config.fair {
        fair.refresh = 100;
    }
    let checker = trace::check(LockSystem { config }, 2);
    let trace = trace::discovery(&checker, "every call is granted in time");
    println!("a parked waiter:\n{}", trace.as_deref().unwrap_or("none"));
    assert!(trace.is_some());
}
