//! The deeper check, one command: `cargo run --release -p lockcore-model --bin model-check --
//! [safety|liveness] [clients] [horizon or rounds] [faults] [max_lag]`; prints the state
//! counts and the trace of any counterexample.

use lockcore_model::system::{Config, LockSystem};
use lockcore_model::trace;
use stateright::{Checker, Expectation, Model};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, default: u64| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default);
    let kind = args.first().map_or("safety", String::as_str);
    let config = match kind {
        "liveness" => Config::liveness(
            usize::try_from(num(1, 3)).unwrap_or(3),
            u8::try_from(num(2, 1)).unwrap_or(1),
            u8::try_from(num(3, 1)).unwrap_or(1),
        ),
        _ => Config {
            horizon: num(2, 8),
            faults: u8::try_from(num(3, 2)).unwrap_or(2),
            max_lag: num(4, 1),
            ..Config::safety(usize::try_from(num(1, 2)).unwrap_or(2))
        },
    };
    println!("{config:?}");
    let started = std::time::Instant::now();
    let checker = trace::check(LockSystem { config }, 2);
    println!(
        "lockcore-model {kind}: states={} unique={} depth={} in {:.1?}",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        started.elapsed()
    );
    let mut failed = false;
    for property in checker.model().properties() {
        let found = trace::discovery(&checker, property.name);
        match (property.expectation, found) {
            (Expectation::Sometimes, found) => {
                println!("{}: reached={}", property.name, found.is_some())
            }
            (_, None) => println!("{}: holds", property.name),
            (_, Some(trace)) => {
                failed = true;
                println!("{}: COUNTEREXAMPLE\n{trace}", property.name);
            }
        }
    }
    std::process::exit(i32::from(failed));
}
