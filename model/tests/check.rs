//! The exhaustive check of the protocol (see `docs/src/model.md`): every interleaving of 2 and
//! 3 clients within the bounds, each property held, the state counts printed.
//! `LOCKCORE_MODEL_DEEP=1` runs the deeper configurations instead.

use lockcore_model::system::{Config, LockSystem};
use lockcore_model::trace;
use stateright::{Checker, Model};

fn deep() -> bool {
    std::env::var_os("LOCKCORE_MODEL_DEEP").is_some()
}

/// Checks `config` exhaustively and fails with the counterexample's trace when a property does
/// not hold; returns the unique states.
fn holds(label: &str, config: Config) -> usize {
    let started = std::time::Instant::now();
    let checker = trace::check(LockSystem { config }, 2);
    let mut failures = Vec::new();
    for property in checker.model().properties() {
        let found = trace::discovery(&checker, property.name);
        match (property.expectation, found) {
            (stateright::Expectation::Sometimes, None) => {
                failures.push(format!("{}: never reached", property.name))
            }
            (stateright::Expectation::Sometimes, Some(_)) | (_, None) => {}
            (_, Some(trace)) => {
                failures.push(format!("{}: counterexample\n{trace}", property.name))
            }
        }
    }
    println!(
        "lockcore-model {label}: states={} unique={} depth={} in {:.1?}",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        started.elapsed()
    );
    assert!(failures.is_empty(), "{label}:\n{}", failures.join("\n"));
    checker.unique_state_count()
}

#[test]
fn two_clients_every_fault() {
    let config = if deep() {
        Config {
            horizon: 22,
            faults: 3,
            max_lag: 2,
            ..Config::safety(2)
        }
    } else {
        Config::safety(2)
    };
    assert!(holds("safety, 2 clients", config) > 1000);
}
