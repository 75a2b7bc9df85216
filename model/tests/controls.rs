//! The negative controls: each variant of the model carries a known bug, and the checker must
//! find a counterexample to the property that bug breaks; the trace is printed. Their twin,
//! the same configuration without a bug, holds every property (so each counterexample is the
//! bug's).

use std::collections::BTreeSet;

use lockcore_model::scripts::ScriptBug;
use lockcore_model::system::{ClientBug, Config, LockSystem};
use lockcore_model::trace;
use stateright::{Checker, HasDiscoveries, Model};

/// The trace of a counterexample to `property` under `config`, if the checker finds one.
fn counterexample(config: Config, property: &'static str) -> Option<String> {
    let started = std::time::Instant::now();
    let checker = LockSystem { config }
        .checker()
        .threads(2)
        .finish_when(HasDiscoveries::AnyOf(BTreeSet::from([property])))
        .spawn_bfs()
        .join();
    let found = trace::discovery(&checker, property);
    println!(
        "{property}: unique states={} in {:.1?}, counterexample={}",
        checker.unique_state_count(),
        started.elapsed(),
        found.is_some()
    );
    found
}

fn assert_found(label: &str, buggy: Config, property: &'static str) {
    let trace = counterexample(buggy, property)
        .unwrap_or_else(|| panic!("{label}: no counterexample to {property:?}"));
    println!("{label}: counterexample to {property:?}:\n{trace}");
    assert!(trace.lines().count() >= 3, "{trace}");
}

#[test]
fn the_twin_without_a_bug_holds() {
    let checker = lockcore_model::trace::check(
        LockSystem {
            config: Config::control(),
        },
        2,
    );
    println!(
        "control twin: unique states={}",
        checker.unique_state_count()
    );
    for property in [
        "mutual exclusion",
        "the queue is never jumped",
        "fencing tokens increase",
    ] {
        assert_eq!(trace::discovery(&checker, property), None, "{property}");
    }
}

#[test]
fn release_without_the_owner_check_breaks_mutual_exclusion() {
    assert_found(
        "release without owner check",
        Config::control().with_script_bug(ScriptBug::ReleaseWithoutOwnerCheck),
        "mutual exclusion",
    );
}

#[test]
fn a_release_that_deletes_past_live_waiters_lets_the_fast_path_jump_the_queue() {
    assert_found(
        "fast path without the queue invariant",
        Config::control().with_script_bug(ScriptBug::ReleaseDeletes),
        "the queue is never jumped",
    );
}

#[test]
fn a_waiter_that_starts_on_a_late_push_breaks_mutual_exclusion() {
    assert_found(
        "waiter starting on a late push",
        Config::control().with_client_bug(ClientBug::StartsOnLatePush),
        "mutual exclusion",
    );
}

#[test]
fn a_claim_window_counted_from_the_grant_breaks_mutual_exclusion() {
    assert_found(
        "claim deadline from the grant",
        Config::control().with_client_bug(ClientBug::ClaimFromGrant),
        "mutual exclusion",
    );
}
