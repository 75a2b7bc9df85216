//! Latency histograms (HDR, nanoseconds) and the small statistics the tables need.

use std::time::Duration;

use hdrhistogram::Histogram;

/// A latency histogram in nanoseconds, 3 significant digits, 1 ns ..= 10 min.
#[derive(Clone)]
pub(crate) struct Hist(Histogram<u64>);

const MAX_NS: u64 = 600_000_000_000;

impl Hist {
    pub(crate) fn new() -> Hist {
        // Constant bounds that `new_with_bounds` accepts (low >= 1, high >= 2 * low, sigfig
        // <= 5): the error arm is unreachable.
        match Histogram::new_with_bounds(1, MAX_NS, 3) {
            Ok(h) => Hist(h),
            Err(e) => panic!("hdrhistogram rejected constant bounds: {e:?}"),
        }
    }

    pub(crate) fn record(&mut self, d: Duration) {
        let ns = u64::try_from(d.as_nanos())
            .unwrap_or(MAX_NS)
            .clamp(1, MAX_NS);
        self.0.saturating_record(ns);
    }

    pub(crate) fn add(&mut self, other: &Hist) {
        // Same bounds on both sides, so `add` cannot fail; a failure would only drop samples.
        let _ = self.0.add(&other.0);
    }

    pub(crate) fn len(&self) -> u64 {
        self.0.len()
    }

    pub(crate) fn quantile(&self, q: f64) -> Option<Duration> {
        (!self.0.is_empty()).then(|| Duration::from_nanos(self.0.value_at_quantile(q)))
    }

    pub(crate) fn p50(&self) -> Option<Duration> {
        self.quantile(0.50)
    }

    pub(crate) fn p99(&self) -> Option<Duration> {
        self.quantile(0.99)
    }

    pub(crate) fn max(&self) -> Option<Duration> {
        (!self.0.is_empty()).then(|| Duration::from_nanos(self.0.max()))
    }
}

/// A duration for a table cell: "48.1 µs", "3.21 ms", "1.20 s".
pub(crate) fn fmt_dur(d: Option<Duration>) -> String {
    let Some(d) = d else {
        return "-".to_owned();
    };
    let ns = d.as_nanos() as f64;
    if ns < 1_000_000.0 {
        format!("{:.1} µs", ns / 1e3)
    } else if ns < 1_000_000_000.0 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}

/// `a / b` as "1.07×", or "-".
pub(crate) fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
        _ => "-".to_owned(),
    }
}

pub(crate) fn secs(d: Option<Duration>) -> Option<f64> {
    d.map(|d| d.as_secs_f64())
}

/// A rate for a table cell: "12 345/s" style with thin grouping.
pub(crate) fn fmt_rate(r: f64) -> String {
    if r >= 100.0 {
        format!("{r:.0}")
    } else if r >= 10.0 {
        format!("{r:.1}")
    } else {
        format!("{r:.2}")
    }
}

/// `a − b` in µs, signed.
pub(crate) fn delta(a: Option<Duration>, b: Option<Duration>) -> String {
    secs(a)
        .zip(secs(b))
        .map_or("-".into(), |(a, b)| format!("{:+.1} µs", (a - b) * 1e6))
}
