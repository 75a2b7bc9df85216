//! The run's figures as a table, and the last line, `nemesis: ops=<n> faults=<n> violations=<n> lost_updates=<n>
//! max_recovery_ms=<n>`, which scripts and tests read.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::fleet::Network;
use super::{Config, Summary};

/// The table: operations, writes, faults by kind with their recovery, violations, leftovers.
pub fn table(summary: &Summary, config: &Config, end_ns: u64) -> String {
    let f = &summary.findings;
    let mut out = String::new();
    let lock = if config.control {
        "naive (SET NX PX, plain DEL, no fencing)"
    } else {
        "lockcore (fenced)"
    };
    let network = match &config.network {
        Network::Loopback => "loopback + fault proxies".to_owned(),
        Network::Namespaces(prefix) => format!("network namespaces {prefix}* + fault proxies"),
    };
    let persistence = if config.persistence {
        "AOF appendfsync always"
    } else {
        "none (known limit: a restart loses locks, fences and counters)"
    };
    let _ = writeln!(out, "nemesis run");
    let _ = writeln!(out, "  seed          {}", config.seed);
    let _ = writeln!(
        out,
        "  workload      {} s, {} worker processes x {} tasks, lock {lock}",
        config.seconds, config.workers, config.tasks
    );
    let _ = writeln!(out, "  network       {network}");
    let _ = writeln!(out, "  persistence   {persistence}");
    if let Some(path) = &config.plot {
        let _ = writeln!(
            out,
            "  plot          {} (leases green when a write was accepted, grey when not; \
             fault bands: {})",
            path.display(),
            super::plot::legend()
        );
    }
    if summary.interrupted {
        let _ = writeln!(
            out,
            "  INTERRUPTED   by Ctrl-C; figures cover the run so far"
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "  {:<34} {:>8}", "operations (acquire invokes)", f.ops);
    let _ = writeln!(out, "  {:<34} {:>8}", "  leases acquired", f.acquired);
    let _ = writeln!(
        out,
        "  {:<34} {:>8}",
        "  cut by a dropped future", f.dropped
    );
    let _ = writeln!(out, "  {:<34} {:>8}", "writes accepted", f.writes_ok);
    let _ = writeln!(
        out,
        "  {:<34} {:>8}",
        "writes rejected or failed", f.writes_failed
    );
    let _ = writeln!(
        out,
        "  {:<34} {:>8}   (resolved: {} applied, {} not)",
        "writes unknown",
        f.unknown,
        f.unknown_applied,
        f.unknown - f.unknown_applied
    );
    let _ = writeln!(
        out,
        "  {:<34} {:>8}",
        "torn history lines", summary.torn_lines
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "  {:<22} {:>6} {:>18}",
        "fault", "count", "max recovery ms"
    );
    let mut by_kind: BTreeMap<&str, (usize, u64)> = BTreeMap::new();
    for ((kind, ms), fault) in f.recovery_ms.iter().zip(&summary.faults) {
        let ms = ms.unwrap_or(end_ns.saturating_sub(fault.heal_ns) / 1_000_000);
        let entry = by_kind.entry(kind.name()).or_default();
        entry.0 += 1;
        entry.1 = entry.1.max(ms);
    }
    for (kind, (count, ms)) in &by_kind {
        let _ = writeln!(out, "  {kind:<22} {count:>6} {ms:>18}");
    }
    let _ = writeln!(out, "  {:<22} {:>6}", "total", summary.faults.len());
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "  fault log (start after the first lease, kind, target, held for, recovery)"
    );
    let began = summary.faults.first().map_or(0, |f| f.start_ns);
    let began = summary
        .findings
        .leases
        .iter()
        .map(|l| l.start_ns)
        .min()
        .unwrap_or(began)
        .min(began);
    for ((_, ms), fault) in f.recovery_ms.iter().zip(&summary.faults) {
        let _ = writeln!(
            out,
            "    +{:>6.2} s  {:<20} {:<46} {:>5} ms  {}",
            fault.start_ns.saturating_sub(began) as f64 / 1e9,
            fault.kind.name(),
            fault.target,
            fault.heal_ns.saturating_sub(fault.start_ns) / 1_000_000,
            ms.map_or("no write accepted until the end".to_owned(), |ms| format!(
                "recovered in {ms} ms"
            ))
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "  {:<34} {:>8}",
        "violations: out of token order", f.order_violations
    );
    let _ = writeln!(
        out,
        "  {:<34} {:>8}",
        "violations: overlapping leases", f.overlap_violations
    );
    let _ = writeln!(
        out,
        "  {:<34} {:>8}",
        "violations: phantom writes", f.phantom
    );
    let _ = writeln!(
        out,
        "  {:<34} {:>8}",
        "violations: left on the server",
        summary.leftovers.len()
    );
    for item in summary.leftovers.iter().take(10) {
        let _ = writeln!(out, "    {item}");
    }
    let _ = writeln!(out, "  {:<34} {:>8}", "lost updates", f.lost_updates);
    out
}

/// `nemesis: ops=<n> faults=<n> violations=<n> lost_updates=<n> max_recovery_ms=<n>`.
pub fn last_line(summary: &Summary, end_ns: u64) -> String {
    format!(
        "nemesis: ops={} faults={} violations={} lost_updates={} max_recovery_ms={}",
        summary.findings.ops,
        summary.faults.len(),
        summary.violations(),
        summary.findings.lost_updates,
        summary.max_recovery_ms(end_ns)
    )
}
