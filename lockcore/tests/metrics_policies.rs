//! Cargo feature `metrics`: a contended `#[distributed_lock]` call that skips its body or calls
//! its fallback is counted once, labelled by key template and policy (never the rendered key),
//! seen through `metrics-util`'s debugging recorder against a real server.
#![cfg(all(feature = "metrics", feature = "macros"))]
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use lockcore::{LockError, LockManager, LockOptions, distributed_lock};
use lockcore_tests::RedisServer;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

#[distributed_lock(key = "report:<id>", manager = m, wait_ms = 0, on_contended = "skip")]
async fn nightly_report(m: &LockManager, id: u64) -> Result<Option<u64>, LockError> {
    Ok(Some(id))
}

#[distributed_lock(key = "stock:<sku>", manager = m, wait_ms = 0, fallback = stock_busy)]
async fn reserve_stock(m: &LockManager, sku: u64) -> Result<&'static str, LockError> {
    let _ = (m, sku);
    Ok("reserved")
}

async fn stock_busy(m: &LockManager, sku: u64) -> Result<&'static str, LockError> {
    let _ = (m, sku);
    Ok("busy")
}

/// The totals of counter `name` with exactly these label sets (`label=value`, any order),
/// from one snapshot.
fn counters<const N: usize>(snapshotter: &Snapshotter, name: &str, sets: [&[&str]; N]) -> [u64; N] {
    let wants: Vec<Vec<String>> = sets
        .iter()
        .map(|labels| {
            let mut want: Vec<String> = labels.iter().map(|l| (*l).to_owned()).collect();
            want.sort();
            want
        })
        .collect();
    let mut totals = [0; N];
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        let mut have: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        have.sort();
        for label in &have {
            assert!(
                !label.contains("report:1") && !label.contains("stock:9"),
                "a rendered key in a label: {label}"
            );
        }
        if let DebugValue::Counter(n) = value
            && key.name() == name
            && let Some(i) = wants.iter().position(|want| *want == have)
        {
            totals[i] += n;
        }
    }
    totals
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skipped_and_fallback_calls_are_counted_by_template_and_policy() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this test binary");
    let server = RedisServer::start();
    let holder = LockManager::connect(&server.url()).await.expect("holder");
    let caller = LockManager::connect(&server.url()).await.expect("caller");
    let opts = LockOptions::new(Duration::from_secs(30));

    // Uncontended: the bodies run, nothing is counted.
    assert_eq!(nightly_report(&caller, 1).await.expect("report"), Some(1));
    assert_eq!(reserve_stock(&caller, 9).await.expect("stock"), "reserved");
    const NAME: &str = "lockcore_contended_calls_total";
    let skip = ["key_template=report:<id>", "policy=skip"];
    let fallback = ["key_template=stock:<sku>", "policy=fallback"];
    assert_eq!(counters(&snapshotter, NAME, [&skip, &fallback]), [0, 0]);

    // Contended: another manager holds both keys.
    let report = holder.acquire("report:1", &opts).await.expect("report:1");
    let stock = holder.acquire("stock:9", &opts).await.expect("stock:9");
    assert_eq!(nightly_report(&caller, 1).await.expect("skipped"), None);
    assert_eq!(reserve_stock(&caller, 9).await.expect("fallback"), "busy");
    assert_eq!(counters(&snapshotter, NAME, [&skip, &fallback]), [1, 1]);
    report.release().await.expect("release");
    stock.release().await.expect("release");
}
