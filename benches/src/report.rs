//! The markdown report: environment, targets, and one table per scenario. The method behind
//! each table is in `benches/README.md`; the report prints figures, one caption per table.

use std::fmt::Write as _;
use std::time::Duration;

use crate::lockers::Kind;
use crate::results::Results;
use crate::scenarios::{BUDGET, Config};
use crate::table::Table;
use crate::tables;

/// Where and how the run happened.
pub(crate) struct Env {
    pub(crate) date: String,
    pub(crate) cores: usize,
    pub(crate) pinning: String,
    pub(crate) cpu: String,
    pub(crate) kernel: String,
    pub(crate) redis: String,
    pub(crate) rustc: String,
    pub(crate) release: bool,
    /// Arguments after `--`, as given (empty for the standard run).
    pub(crate) args: String,
    pub(crate) load_before: String,
    pub(crate) load_after: String,
    pub(crate) duration: Duration,
    /// The runtime flavor of B1, B3, B4 and B6.
    pub(crate) latency_runtime: &'static str,
}

/// The command that produces this report.
pub(crate) const COMMAND: &str = "cargo bench -p lockcore-benches";

pub(crate) fn render(env: &Env, cfg: &Config, r: &Results) -> String {
    let mut o = String::from("# lockcore benchmarks\n\n");
    let profile = if env.release {
        "release"
    } else {
        "DEBUG (figures meaningless: use --release)"
    };
    let _ = write!(
        o,
        "- date: {} (UTC)\n\
         - machine: {} cores (`nproc`), {}, Linux {}; load average before / after: {} / {}\n\
         - pinning: {}\n\
         - redis-server {}: private processes on 127.0.0.1 started by this run\n\
         - {}, {profile} profile; tokio runtime: {} for B1, B3, B4 and B6, multi-thread ({} workers) for B2 and B5\n\
         - command: `{COMMAND}`{}; took {:.0} s\n\
         - every implementation: ttl {} s, wait budget {} s; cells of {:.1} s (B1, B4, B6), {:.1} s (B2), {:.1} s (B3), interleaved over {} rounds\n\
         - method: `benches/README.md`; \"the floor\" is the faster (ops/s) of its two TCP_NODELAY settings, per cell\n\n",
        env.date,
        env.cores,
        env.cpu,
        env.kernel,
        env.load_before,
        env.load_after,
        env.pinning,
        env.redis,
        env.rustc,
        env.latency_runtime,
        env.cores,
        env.args,
        env.duration.as_secs_f64(),
        BUDGET.ttl.as_secs(),
        BUDGET.wait.as_secs(),
        cfg.latency_cell.as_secs_f64(),
        cfg.contention_cell.as_secs_f64(),
        cfg.handoff_cell.as_secs_f64(),
        cfg.rounds,
    );
    crate::targets::render(&mut o, r);
    tables::section(&mut o, "Implementations", "\"Implementations\"");
    let mut t = Table::new("implementation | connection model | acquire / retry");
    for kind in Kind::ALL {
        t.push_row([kind.name(), kind.connection_model(), kind.retry_policy()]);
    }
    t.render(&mut o);
    if let Some(b1) = &r.b1 {
        tables::b1_table(&mut o, b1);
    }
    if let Some(b2) = &r.b2 {
        tables::b2_table(&mut o, b2);
    }
    if let Some(b3) = &r.b3 {
        tables::b3_table(&mut o, b3);
    }
    if let Some(b4) = &r.b4 {
        tables::b4_table(&mut o, b4);
    }
    if let Some(b5) = &r.b5 {
        tables::b5_table(&mut o, b5);
    }
    if let Some(b6) = &r.b6 {
        tables::b6_tables(&mut o, b6);
    }
    o
}
