//! The worker → parent protocol and the parent's tables.
//!
//! A worker prints exactly two lines on stdout: `ready` once its Redis and
//! SQLite connections are open, and after the parent's `go` one report line:
//!
//! ```text
//! report instance=2 placed=17 sold_out=23 busy=0 failed=0 waits_us=812,40311,...
//! ```

use std::fmt;
use std::time::Duration;

/// Which variant of the order code a phase runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Phase {
    /// `place_order_unlocked`: plain async fn.
    NoLock,
    /// `place_order`: the same logic under `#[distributed_lock]`.
    WithLock,
}

impl Phase {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Phase::NoLock => "no-lock",
            Phase::WithLock => "with-lock",
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One worker's counts, and the lock wait of every order it processed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct WorkerReport {
    pub(crate) instance: u32,
    pub(crate) placed: u64,
    pub(crate) sold_out: u64,
    /// Lock stayed busy for the whole wait budget (`LockError::Contended`).
    pub(crate) busy: u64,
    /// Any other error (Redis down, SQLite error, ...).
    pub(crate) failed: u64,
    /// Time from calling the order fn to its body starting, per processed
    /// order (placed or sold out), in µs.
    pub(crate) waits_us: Vec<u64>,
}

impl WorkerReport {
    pub(crate) fn to_line(&self) -> String {
        let waits: Vec<String> = self.waits_us.iter().map(u64::to_string).collect();
        format!(
            "report instance={} placed={} sold_out={} busy={} failed={} waits_us={}",
            self.instance,
            self.placed,
            self.sold_out,
            self.busy,
            self.failed,
            waits.join(",")
        )
    }

    pub(crate) fn parse(line: &str) -> Result<WorkerReport, String> {
        let mut fields = line.split_whitespace();
        if fields.next() != Some("report") {
            return Err(format!("not a report line: {line:?}"));
        }
        let mut report = WorkerReport::default();
        for field in fields {
            let (key, value) = field
                .split_once('=')
                .ok_or_else(|| format!("malformed field {field:?} in {line:?}"))?;
            let number = |v: &str| {
                v.parse::<u64>()
                    .map_err(|e| format!("field {key}={v:?} in report: {e}"))
            };
            match key {
                "instance" => {
                    report.instance = value
                        .parse()
                        .map_err(|e| format!("field instance={value:?}: {e}"))?
                }
                "placed" => report.placed = number(value)?,
                "sold_out" => report.sold_out = number(value)?,
                "busy" => report.busy = number(value)?,
                "failed" => report.failed = number(value)?,
                "waits_us" => {
                    report.waits_us = value
                        .split(',')
                        .filter(|v| !v.is_empty())
                        .map(number)
                        .collect::<Result<_, _>>()?
                }
                _ => return Err(format!("unknown field {key:?} in report")),
            }
        }
        Ok(report)
    }
}

/// Everything the parent knows after a phase.
#[derive(Debug, Clone)]
pub(crate) struct PhaseSummary {
    pub(crate) phase: Phase,
    pub(crate) initial_stock: i64,
    pub(crate) attempted: u64,
    /// Rows in `orders` (ground truth from SQLite).
    pub(crate) orders: i64,
    /// `products.stock` at the end (ground truth from SQLite).
    pub(crate) stock: i64,
    pub(crate) sold_out: u64,
    pub(crate) busy: u64,
    pub(crate) failed: u64,
    pub(crate) waits_us: Vec<u64>,
    pub(crate) elapsed: Duration,
}

impl PhaseSummary {
    pub(crate) fn new(
        phase: Phase,
        initial_stock: i64,
        attempted: u64,
        (orders, stock): (i64, i64),
        reports: &[WorkerReport],
        elapsed: Duration,
    ) -> PhaseSummary {
        let mut waits_us: Vec<u64> = reports
            .iter()
            .flat_map(|r| r.waits_us.iter().copied())
            .collect();
        waits_us.sort_unstable();
        PhaseSummary {
            phase,
            initial_stock,
            attempted,
            orders,
            stock,
            sold_out: reports.iter().map(|r| r.sold_out).sum(),
            busy: reports.iter().map(|r| r.busy).sum(),
            failed: reports.iter().map(|r| r.failed).sum(),
            waits_us,
            elapsed,
        }
    }

    /// Units sold that did not exist.
    pub(crate) fn oversold(&self) -> i64 {
        (self.orders - self.initial_stock).max(0)
    }

    /// Every order row must match exactly one decrement.
    pub(crate) fn consistent(&self) -> bool {
        self.stock == self.initial_stock - self.orders
    }

    /// `no-lock: orders=120 stock=-70 oversold=70`
    pub(crate) fn summary_line(&self) -> String {
        format!(
            "{}: orders={} stock={} oversold={}",
            self.phase,
            self.orders,
            self.stock,
            self.oversold()
        )
    }

    pub(crate) fn table(&self) -> String {
        let wait = |p: f64| match self.phase {
            Phase::NoLock => "- (no lock)".to_owned(),
            Phase::WithLock => percentile_us(&self.waits_us, p)
                .map(|us| format!("{:.2} ms", us as f64 / 1000.0))
                .unwrap_or_else(|| "-".to_owned()),
        };
        let rows: [(&str, String); 9] = [
            ("orders", self.orders.to_string()),
            ("final stock", self.stock.to_string()),
            ("oversold", self.oversold().to_string()),
            ("rejected (sold out)", self.sold_out.to_string()),
            ("rejected (busy)", self.busy.to_string()),
            ("failed", self.failed.to_string()),
            ("lock wait p50", wait(50.0)),
            ("lock wait p99", wait(99.0)),
            ("elapsed", format!("{:.2} s", self.elapsed.as_secs_f64())),
        ];
        let mut out = format!(
            "phase {}: {} order attempts against stock {}\n",
            self.phase, self.attempted, self.initial_stock
        );
        out.push_str(&format!("  +{:-<22}+{:-<14}+\n", "", ""));
        for (name, value) in rows {
            out.push_str(&format!("  | {name:<20} | {value:>12} |\n"));
        }
        out.push_str(&format!("  +{:-<22}+{:-<14}+\n", "", ""));
        out
    }
}

/// Nearest-rank percentile of sorted samples.
pub(crate) fn percentile_us(sorted: &[u64], p: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    let index = rank.clamp(1, sorted.len()) - 1;
    sorted.get(index).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_round_trips() {
        let report = WorkerReport {
            instance: 2,
            placed: 17,
            sold_out: 23,
            busy: 1,
            failed: 0,
            waits_us: vec![5, 812, 40311],
        };
        assert_eq!(WorkerReport::parse(&report.to_line()), Ok(report));
        let empty = WorkerReport::default();
        assert_eq!(WorkerReport::parse(&empty.to_line()), Ok(empty));
        assert!(WorkerReport::parse("ready").is_err());
    }

    #[test]
    fn percentiles() {
        let samples: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile_us(&samples, 50.0), Some(50));
        assert_eq!(percentile_us(&samples, 99.0), Some(99));
        assert_eq!(percentile_us(&[7], 99.0), Some(7));
        assert_eq!(percentile_us(&[], 50.0), None);
    }
}
