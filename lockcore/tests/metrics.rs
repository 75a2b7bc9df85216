//! Cargo feature `metrics`: what a real server's acquisitions, waits, hand-offs, renewals and
//! losses record, seen through `metrics-util`'s debugging recorder. Labels are the key template
//! (or `"-"`) and an outcome, never the rendered key.
#![cfg(feature = "metrics")]
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::HashMap;
use std::time::Duration;

use lockcore::{LockManager, LockOptions};
use lockcore_tests::RedisServer;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

/// Metric name and sorted `label=value` pairs.
type Series = (String, Vec<String>);

/// Everything recorded so far (the debugging recorder's snapshots drain).
#[derive(Default)]
struct Totals {
    counters: HashMap<Series, u64>,
    histograms: HashMap<Series, Vec<f64>>,
}

impl Totals {
    fn take(&mut self, snapshotter: &Snapshotter) {
        for (key, _, _, value) in snapshotter.snapshot().into_vec() {
            let key = key.key();
            let mut labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            labels.sort();
            let series = (key.name().to_owned(), labels);
            match value {
                DebugValue::Counter(n) => *self.counters.entry(series).or_default() += n,
                DebugValue::Histogram(xs) => self
                    .histograms
                    .entry(series)
                    .or_default()
                    .extend(xs.into_iter().map(|x| x.into_inner())),
                DebugValue::Gauge(_) => {}
            }
        }
    }

    fn counter(&self, name: &str, labels: &[&str]) -> u64 {
        let mut labels: Vec<String> = labels.iter().map(|l| (*l).to_owned()).collect();
        labels.sort();
        self.counters
            .get(&(name.to_owned(), labels))
            .copied()
            .unwrap_or(0)
    }

    fn samples(&self, name: &str, labels: &[&str]) -> usize {
        let mut labels: Vec<String> = labels.iter().map(|l| (*l).to_owned()).collect();
        labels.sort();
        self.histograms
            .get(&(name.to_owned(), labels))
            .map_or(0, Vec::len)
    }
}

const TEMPLATE: &str = "order:lock:product:<product_id>";

fn templated(opts: LockOptions) -> LockOptions {
    lockcore::__private::with_key_template(opts, TEMPLATE)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquisitions_waits_handoffs_renewals_and_losses_are_recorded_by_template() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this test binary");
    let server = RedisServer::start();
    let a = LockManager::connect(&server.url())
        .await
        .expect("manager a");
    let b = LockManager::connect(&server.url())
        .await
        .expect("manager b");
    let mut raw = server.connection().await;
    let ttl = Duration::from_secs(10);
    let mut totals = Totals::default();

    // The explicit API: no template, label "-".
    let plain = a
        .acquire("plain", &LockOptions::new(ttl))
        .await
        .expect("plain");
    plain.release().await.expect("release");
    // The attribute's way: labelled by template, for two rendered keys.
    for id in [1, 2] {
        let key = format!("order:lock:product:{id}");
        let guard = a
            .acquire(&key, &templated(LockOptions::new(ttl)))
            .await
            .expect("acquire");
        guard.release().await.expect("release");
    }
    totals.take(&snapshotter);
    let tpl = format!("key_template={TEMPLATE}");
    let acquired = ["outcome=acquired", tpl.as_str()];
    assert_eq!(totals.counter("lockcore_acquisitions_total", &acquired), 2);
    assert_eq!(totals.samples("lockcore_wait_seconds", &acquired), 2);
    assert_eq!(
        totals.counter(
            "lockcore_acquisitions_total",
            &["key_template=-", "outcome=acquired"]
        ),
        1
    );
    assert_eq!(totals.samples("lockcore_hold_seconds", &[tpl.as_str()]), 2);
    assert_eq!(
        totals.counter(
            "lockcore_releases_total",
            &[tpl.as_str(), "outcome=released"]
        ),
        2
    );

    // Contended (polling) and busy (`try_acquire`), then a queued waiter handed the lock.
    let key = "order:lock:product:3";
    let held = a
        .acquire(key, &templated(LockOptions::new(ttl)))
        .await
        .expect("held");
    let polling = templated(
        LockOptions::new(ttl)
            .wait(Duration::from_millis(30))
            .handoff(false),
    );
    assert!(
        b.acquire(key, &polling)
            .await
            .is_err_and(|e| e.is_contended())
    );
    assert!(
        b.try_acquire(key, &templated(LockOptions::new(ttl)))
            .await
            .expect("try")
            .is_none()
    );
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move {
            b.acquire(
                key,
                &templated(LockOptions::new(ttl).wait(Duration::from_secs(10))),
            )
            .await
        })
    };
    let (queue, _) = lockcore::keyspace::waiter_queue_keys("lock:", &format!("lock:{key}"));
    while redis::cmd("LLEN")
        .arg(&queue)
        .query_async::<u64>(&mut raw)
        .await
        .expect("LLEN")
        == 0
    {
        tokio::task::yield_now().await;
    }
    held.release().await.expect("release");
    let handed = waiter.await.expect("task").expect("handed over");
    handed.release().await.expect("release");
    totals.take(&snapshotter);
    let contended = ["outcome=contended", tpl.as_str()];
    assert_eq!(totals.counter("lockcore_acquisitions_total", &contended), 1);
    assert_eq!(totals.samples("lockcore_wait_seconds", &contended), 1);
    assert_eq!(
        totals.counter(
            "lockcore_acquisitions_total",
            &["outcome=busy", tpl.as_str()]
        ),
        1
    );
    assert_eq!(
        totals.counter("lockcore_handoffs_total", &[tpl.as_str()]),
        1
    );

    // The watchdog renews, then finds the key gone: one loss, reason "taken".
    let watched = templated(LockOptions::new(Duration::from_millis(300)).watchdog(true));
    let guard = a
        .acquire("order:lock:product:4", &watched)
        .await
        .expect("watched");
    let renewed = ["outcome=renewed", tpl.as_str()];
    while totals.counter("lockcore_renewals_total", &renewed) == 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        totals.take(&snapshotter);
    }
    // Another party deletes the key: the watchdog's next renewal finds it gone.
    let _: i64 = redis::AsyncCommands::del(&mut raw, guard.key())
        .await
        .expect("DEL");
    guard.lost().await;
    totals.take(&snapshotter);
    assert_eq!(
        totals.counter("lockcore_losses_total", &["reason=taken", tpl.as_str()]),
        1
    );
    drop(guard);

    // Never a rendered key in any label.
    totals.take(&snapshotter);
    let every_label = totals
        .counters
        .keys()
        .chain(totals.histograms.keys())
        .flat_map(|(_, labels)| labels.iter());
    for label in every_label {
        assert!(
            !label.contains("product:3") && !label.contains("plain"),
            "{label}"
        );
    }
}
