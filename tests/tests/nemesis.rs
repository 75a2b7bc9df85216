//! The nemesis checker, proven able to fail: a short run of the real workload under faults
//! shows no violation and no lost update, and the same workload under the naive lock (plain
//! `DEL` release, no fencing) is caught. The full run is the `nemesis` binary.

use lockcore_tests::nemesis::faults::FaultKind;
use lockcore_tests::nemesis::fleet::Network;
use lockcore_tests::nemesis::{self, Config};

fn config(control: bool) -> Config {
    Config {
        seconds: 12,
        control,
        persistence: true,
        workers: 3,
        tasks: 3,
        seed: 12,
        // The faults that make a naive lock fail, and the ones that make replies ambiguous.
        faults: vec![
            FaultKind::HolderPause,
            FaultKind::ReplyLoss,
            FaultKind::KillWorker,
            FaultKind::ServerPauseLong,
        ],
        worker_exe: env!("CARGO_BIN_EXE_nemesis").into(),
        network: Network::Loopback,
        plot: None,
    }
}

#[test]
fn short_real_run_under_faults_has_no_violation_and_no_lost_update() {
    let (summary, end_ns) =
        nemesis::run(&config(false)).unwrap_or_else(|e| panic!("nemesis run: {e}"));
    let line = nemesis::report::last_line(&summary, end_ns);
    eprintln!(
        "{}{line}",
        nemesis::report::table(&summary, &config(false), end_ns)
    );
    assert!(summary.faults.len() >= 2, "{line}");
    assert!(summary.findings.writes_ok > 0, "{line}");
    assert_eq!(summary.violations(), 0, "{line}: {:?}", summary.leftovers);
    assert_eq!(summary.findings.lost_updates, 0, "{line}");
}

#[test]
fn short_control_run_is_caught_by_the_checker() {
    let (summary, end_ns) =
        nemesis::run(&config(true)).unwrap_or_else(|e| panic!("nemesis run: {e}"));
    let line = nemesis::report::last_line(&summary, end_ns);
    eprintln!(
        "{}{line}",
        nemesis::report::table(&summary, &config(true), end_ns)
    );
    assert!(summary.findings.writes_ok > 0, "{line}");
    assert!(
        summary.violations() > 0,
        "the checker missed the naive lock: {line}"
    );
}
