//! The nemesis' share workloads, proven able to fail: under lockcore, with workers paused past
//! their TTL or killed between their check and their write, no more than 3 holders of a
//! semaphore of 3 believe they hold at once and no stale row lands, and no reader of a
//! read-write lock overlaps a writer and no write is lost; the naive controls are caught.

use lockcore_tests::nemesis::family::{Family, FamilySummary, PERMITS, run};
use lockcore_tests::nemesis::procs::ProcConfig;

fn run_for(family: Family, control: bool) -> FamilySummary {
    let config = ProcConfig {
        seconds: 6,
        control,
        workers: 5,
        seed: 23,
        worker_exe: env!("CARGO_BIN_EXE_nemesis").into(),
    };
    let summary = run(family, &config).unwrap_or_else(|e| panic!("{} run: {e}", family.name()));
    eprintln!("{}", summary.last_line());
    summary
}

#[test]
fn semaphore_never_lets_more_than_3_in_nor_a_stale_row_land() {
    let summary = run_for(Family::Semaphore, false);
    let line = summary.last_line();
    assert!(summary.faults >= 2, "{line}");
    assert!(summary.writes > 0, "{line}");
    assert_eq!(
        summary.most_inside,
        u64::from(PERMITS),
        "all permits were used: {line}"
    );
    assert!(
        summary.refused > 0,
        "a paused holder's row was refused: {line}"
    );
    assert_eq!(summary.violations(), 0, "{line}");
}

#[test]
fn the_naive_counter_semaphore_is_caught() {
    let summary = run_for(Family::Semaphore, true);
    let line = summary.last_line();
    assert!(summary.writes > 0, "{line}");
    assert!(
        summary.violations() > 0,
        "the checker missed the naive semaphore: {line}"
    );
}

#[test]
fn rwlock_never_overlaps_a_writer_nor_loses_a_write() {
    let summary = run_for(Family::RwLock, false);
    let line = summary.last_line();
    assert!(summary.faults >= 2, "{line}");
    assert!(summary.writes > 0, "{line}");
    assert!(summary.most_inside >= 2, "readers shared the lock: {line}");
    assert_eq!(summary.violations(), 0, "{line}");
}

#[test]
fn the_naive_rwlock_is_caught() {
    let summary = run_for(Family::RwLock, true);
    let line = summary.last_line();
    assert!(summary.writes > 0, "{line}");
    assert!(
        summary.overlaps > 0,
        "readers ignoring the lock overlapped writers: {line}"
    );
    assert!(summary.violations() > 0, "{line}");
}
