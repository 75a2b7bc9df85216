//! The nemesis' leader workload, proven able to fail: under lockcore's fenced terms no stale
//! heartbeat lands while the leader is paused or killed between its check and its write; the
//! control (the same heartbeats without the term check) is caught.

use lockcore_tests::nemesis::leader::{LeaderConfig, run};

fn config(control: bool) -> LeaderConfig {
    LeaderConfig {
        seconds: 8,
        control,
        workers: 3,
        seed: 25,
        worker_exe: env!("CARGO_BIN_EXE_nemesis").into(),
    }
}

#[test]
fn fenced_terms_land_no_stale_heartbeat() {
    let summary = run(&config(false)).unwrap_or_else(|e| panic!("leader run: {e}"));
    let line = summary.last_line();
    eprintln!("{line}");
    assert!(summary.faults >= 2, "{line}");
    assert!(summary.writes > 0, "{line}");
    assert!(
        summary.refused > 0,
        "a paused leader's write was refused: {line}"
    );
    assert_eq!(summary.violations, 0, "{line}");
}

#[test]
fn the_unfenced_control_is_caught() {
    let summary = run(&config(true)).unwrap_or_else(|e| panic!("leader run: {e}"));
    let line = summary.last_line();
    eprintln!("{line}");
    assert!(summary.writes > 0, "{line}");
    assert!(
        summary.violations > 0,
        "the checker missed the stale heartbeats: {line}"
    );
}
