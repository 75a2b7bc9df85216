//! The markdown report: environment, targets, and one table per scenario.

use std::time::Duration;

use crate::lockers::Kind;
use crate::scenarios::{
    B1, B1Setup, B3, B4_NODES, B5_TTL, BUDGET, Config, Contention, Cycles, Renewals, Row,
};
use crate::stats::{fmt_dur, fmt_rate, ratio, secs};
use lockcore_tests::stats::jain;

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
    /// The runtime flavor of B1 and B4.
    pub(crate) latency_runtime: &'static str,
}

/// Everything measured; a scenario that was not run is `None`.
pub(crate) struct Results {
    pub(crate) b1: Option<Result<B1, String>>,
    pub(crate) b2: Option<Vec<Row<Vec<Contention>>>>,
    pub(crate) b3: Option<Result<B3, String>>,
    pub(crate) b4: Option<Vec<Row<Vec<Cycles>>>>,
    pub(crate) b5: Option<Vec<Row<Vec<Renewals>>>>,
}

/// The command that produces this report.
pub(crate) const COMMAND: &str = "cargo bench -p lockcore-benches";

pub(crate) fn render(env: &Env, cfg: &Config, r: &Results) -> String {
    let mut out = String::new();
    let o = &mut out;
    line(o, "# lockcore benchmarks");
    line(o, "");
    line(o, &format!("- date: {} (UTC)", env.date));
    line(
        o,
        &format!(
            "- machine: {} cores (`nproc`), {}, Linux {}; load average before / after: {} / {}",
            env.cores, env.cpu, env.kernel, env.load_before, env.load_after
        ),
    );
    line(o, &format!("- pinning: {}", env.pinning));
    line(
        o,
        &format!(
            "- redis-server {}: private processes on 127.0.0.1 started by this run (`--save \"\" --appendonly no`)",
            env.redis
        ),
    );
    line(
        o,
        &format!(
            "- {}, {} profile; tokio runtime: {} for B1, B3 and B4, multi-thread ({} workers) for B2 and B5",
            env.rustc,
            if env.release {
                "release"
            } else {
                "DEBUG (figures meaningless: use --release)"
            },
            env.latency_runtime,
            env.cores
        ),
    );
    line(
        o,
        &format!(
            "- command: `{COMMAND}`{}; took {:.0} s",
            env.args,
            env.duration.as_secs_f64()
        ),
    );
    line(
        o,
        &format!(
            "- every implementation: ttl {} s, wait budget {} s, its documented retry defaults (B1-B4)",
            BUDGET.ttl.as_secs(),
            BUDGET.wait.as_secs()
        ),
    );
    line(o, "");
    targets(o, r);
    implementations(o);
    if let Some(b1) = &r.b1 {
        b1_table(o, cfg, b1);
    }
    if let Some(b2) = &r.b2 {
        b2_table(o, cfg, b2);
    }
    if let Some(b3) = &r.b3 {
        b3_table(o, cfg, b3);
    }
    if let Some(b4) = &r.b4 {
        b4_table(o, cfg, b4);
    }
    if let Some(b5) = &r.b5 {
        b5_table(o, cfg, b5);
    }
    out
}

fn line(o: &mut String, s: &str) {
    o.push_str(s);
    o.push('\n');
}

fn verdict(met: Option<bool>) -> &'static str {
    match met {
        Some(true) => "met",
        Some(false) => "**missed**",
        None => "not measured",
    }
}

// ---------------------------------------------------------------------------------------------
// Lookups

fn b1_cell(b1: &B1, kind: Kind, setup: B1Setup) -> Option<&Cycles> {
    let ti = b1.setups.iter().position(|&s| s == setup)?;
    b1.rows
        .iter()
        .find(|row| row.kind == kind)?
        .cells
        .as_ref()
        .ok()?
        .get(ti)
        .filter(|c| c.ops > 0)
}

fn b2_cell(
    b2: &[Row<Vec<Contention>>],
    kind: Kind,
    contenders: usize,
    hold: Duration,
) -> Option<&Contention> {
    b2.iter()
        .find(|row| row.kind == kind)?
        .cells
        .as_ref()
        .ok()?
        .iter()
        .find(|c| c.contenders == contenders && c.hold == hold)
}

/// B3's yardsticks: the p50 `PING` round trips (after an idle pause, back to back) measured
/// alongside the hand-offs.
fn floor_rtt(r: &Results) -> Option<(Duration, Duration)> {
    let b3 = r.b3.as_ref()?.as_ref().ok()?;
    Some((b3.rtt_idle.hist.p50()?, b3.rtt_hot.hist.p50()?))
}

fn raw_handoff_p50(r: &Results) -> Option<Duration> {
    r.b3.as_ref()?
        .as_ref()
        .ok()?
        .raw_handoff
        .as_ref()
        .ok()?
        .hist
        .p50()
}

fn b3_p50(r: &Results, kind: Kind) -> Option<Duration> {
    r.b3.as_ref()?
        .as_ref()
        .ok()?
        .rows
        .iter()
        .find(|row| row.kind == kind)?
        .cells
        .as_ref()
        .ok()?
        .hist
        .p50()
}

// ---------------------------------------------------------------------------------------------
// Targets

fn targets(o: &mut String, r: &Results) {
    line(o, "## Targets");
    line(o, "");
    line(
        o,
        "B2 targets are for 8 contenders with separate managers, hold 1 ms. All figures from this run.",
    );
    line(o, "");
    line(o, "| target | implementation | figure | result |");
    line(o, "|---|---|---|---|");
    let ours = [Kind::LockcoreHandoff, Kind::Lockcore];
    let b1 = r.b1.as_ref().and_then(|b| b.as_ref().ok());
    let b2 = r.b2.as_deref();
    let hold = Duration::from_millis(1);
    for &kind in &ours {
        let name = kind.name();
        let mut t = |target: &str, figure: String, met: Option<bool>| {
            line(
                o,
                &format!("| {target} | {name} | {figure} | {} |", verdict(met)),
            );
        };
        // B1
        for same_cpu in [false, true] {
            let setup = B1Setup { tasks: 1, same_cpu };
            let Some((ours, floor)) =
                b1.and_then(|b| Some((b1_cell(b, kind, setup)?, b1_cell(b, Kind::Floor, setup)?)))
            else {
                if !same_cpu {
                    t("B1 p50 at 1 task ≤ 1.10 × floor", "-".to_owned(), None);
                }
                continue;
            };
            let (a, f) = (secs(ours.hist.p50()), secs(floor.hist.p50()));
            let fenced = b1.and_then(|b| b1_cell(b, Kind::FloorFenced, setup));
            let fig = format!(
                "{} ({} vs floor {}: {}){}",
                ratio(a, f),
                fmt_dur(ours.hist.p50()),
                fmt_dur(floor.hist.p50()),
                a.zip(f)
                    .map_or("-".into(), |(a, f)| format!("{:+.1} µs", (a - f) * 1e6)),
                fenced.map_or(String::new(), |c| format!(
                    "; {} of the floor + fencing token ({})",
                    ratio(a, secs(c.hist.p50())),
                    fmt_dur(c.hist.p50())
                ))
            );
            let target = if same_cpu {
                "B1 p50 at 1 task ≤ 1.10 × floor, server on the client's CPU"
            } else {
                "B1 p50 at 1 task ≤ 1.10 × floor"
            };
            t(target, fig, a.zip(f).map(|(a, f)| a <= 1.10 * f));
        }
        let (fig, met) = match b1.and_then(|b| {
            let setup = B1Setup {
                tasks: 64,
                same_cpu: false,
            };
            Some((
                b1_cell(b, kind, setup)?,
                b1_cell(b, Kind::Floor, setup)?,
                b1_cell(b, Kind::FloorFenced, setup).and_then(Cycles::ops_per_s),
            ))
        }) {
            Some((ours, floor, fenced)) => {
                let (a, f) = (ours.ops_per_s(), floor.ops_per_s());
                (
                    format!(
                        "{} ({} vs floor {} ops/s){}",
                        ratio(a, f),
                        a.map_or("-".into(), fmt_rate),
                        f.map_or("-".into(), fmt_rate),
                        fenced.map_or(String::new(), |c| format!(
                            "; {} of the floor + fencing token ({} ops/s)",
                            ratio(a, Some(c)),
                            fmt_rate(c)
                        ))
                    ),
                    a.zip(f).map(|(a, f)| a >= 0.9 * f),
                )
            }
            None => ("-".to_owned(), None),
        };
        t("B1 ops/s at 64 tasks ≥ 0.9 × floor", fig, met);
        // B2
        let ours2 = b2.and_then(|b| b2_cell(b, kind, 8, hold));
        let rs2 = b2.and_then(|b| b2_cell(b, Kind::Rslock, 8, hold));
        let (fig, met) = match (ours2, rs2) {
            (Some(a), Some(b)) => (
                format!(
                    "{} ({} vs rslock {} /s)",
                    ratio(Some(a.per_s()), Some(b.per_s())),
                    fmt_rate(a.per_s()),
                    fmt_rate(b.per_s())
                ),
                Some(a.per_s() >= 1.2 * b.per_s()),
            ),
            _ => ("-".to_owned(), None),
        };
        t("B2 acquisitions/s ≥ 1.2 × rslock", fig, met);
        let (fig, met) = match ours2.and_then(Contention::client_per_acq) {
            Some(c) => (
                format!(
                    "{c:.2} ({})",
                    ours2.map_or("-".into(), |a| a.commands.breakdown(a.acquisitions as f64))
                ),
                Some(c <= 3.0),
            ),
            None => ("-".to_owned(), None),
        };
        t(
            "B2 ≤ 3 Redis commands per acquisition (commands clients send)",
            fig,
            met,
        );
        // The same, counting every command Redis runs: script-internal calls too, as
        // `INFO stats` `total_commands_processed` does.
        let all = |c: &Contention| Some(c.client_per_acq()? + c.lua_per_acq()?);
        let (fig, met) = match ours2.and_then(all) {
            Some(c) => (
                format!(
                    "{c:.2}; rslock {}",
                    rs2.and_then(all).map_or("-".into(), |r| format!("{r:.2}"))
                ),
                Some(c <= 3.0),
            ),
            None => ("-".to_owned(), None),
        };
        t(
            "B2 ≤ 3 Redis commands per acquisition (all commands Redis runs, script-internal calls included)",
            fig,
            met,
        );
        let (fig, met) = match ours2.and_then(|a| jain(&a.per_contender)) {
            Some(j) => (format!("{j:.3}"), Some(j >= 0.95)),
            None => ("-".to_owned(), None),
        };
        t("B2 Jain fairness ≥ 0.95", fig, met);
        let (fig, met) = match (
            ours2.and_then(|a| a.waits.p99()),
            rs2.and_then(|b| b.waits.p99()),
        ) {
            (Some(a), Some(b)) => (
                format!("{} vs rslock {}", fmt_dur(Some(a)), fmt_dur(Some(b))),
                Some(a < b),
            ),
            _ => ("-".to_owned(), None),
        };
        t("B2 wait p99 below rslock's", fig, met);
        // B3
        let ours3 = b3_p50(r, kind);
        let rs3 = b3_p50(r, Kind::Rslock);
        let rtt = floor_rtt(r);
        for (yardstick, idle_pause) in [("after an idle pause", true), ("back to back", false)] {
            let (fig, met) = match (ours3, rtt) {
                (Some(a), Some((idle, hot))) => {
                    let rtt = if idle_pause { idle } else { hot };
                    let raw = raw_handoff_p50(r);
                    (
                        format!(
                            "{} ({} vs {}); raw pushed hand-off {} ({}); rslock {}",
                            ratio(secs(Some(a)), secs(Some(rtt))),
                            fmt_dur(Some(a)),
                            fmt_dur(Some(rtt)),
                            fmt_dur(raw),
                            ratio(secs(raw), secs(Some(rtt))),
                            fmt_dur(rs3)
                        ),
                        Some(a.as_secs_f64() <= 3.0 * rtt.as_secs_f64()),
                    )
                }
                _ => ("-".to_owned(), None),
            };
            t(
                &format!("B3 hand-off p50 ≤ 3 × floor round trip (`PING` {yardstick})"),
                fig,
                met,
            );
        }
    }
    // B4 and B5: lockcore with `handoff(false)` (Redlock has no hand-off; renewals are the
    // same in both modes).
    let b4 = r.b4.as_ref().and_then(|rows| {
        let cells = rows
            .iter()
            .find(|row| row.kind == Kind::Lockcore)?
            .cells
            .as_ref()
            .ok()?;
        Some((cells.first()?.hist.p50()?, cells.get(2)?.hist.p50()?))
    });
    let (fig, met) = match b4 {
        Some((n1, n5)) => (
            format!(
                "{} ({} vs {})",
                ratio(secs(Some(n5)), secs(Some(n1))),
                fmt_dur(Some(n5)),
                fmt_dur(Some(n1))
            ),
            Some(n5.as_secs_f64() <= 1.5 * n1.as_secs_f64()),
        ),
        None => ("-".to_owned(), None),
    };
    line(
        o,
        &format!(
            "| B4 Redlock N=5 p50 ≤ 1.5 × N=1 | {} | {fig} | {} |",
            Kind::Lockcore.name(),
            verdict(met)
        ),
    );
    let b5 = r.b5.as_ref().and_then(|rows| {
        rows.iter()
            .find(|row| row.kind == Kind::Lockcore)?
            .cells
            .as_ref()
            .ok()?
            .iter()
            .find(|c| c.locks == 1000)
    });
    for (what, with_script_calls) in [
        ("commands clients send", false),
        (
            "all commands Redis runs, script-internal calls included",
            true,
        ),
    ] {
        let (fig, met) = match b5 {
            Some(c) => {
                let per_s = c.client_per_s()
                    + if with_script_calls {
                        c.lua_per_s()
                    } else {
                        0.0
                    };
                (
                    format!(
                        "{} commands/s ({} client, {} in scripts)",
                        fmt_rate(per_s),
                        fmt_rate(c.client_per_s()),
                        fmt_rate(c.lua_per_s())
                    ),
                    Some(per_s <= 100.0),
                )
            }
            None => ("-".to_owned(), None),
        };
        line(
            o,
            &format!(
                "| B5 1,000 locks, ttl 3 s: ≤ 100 commands/s ({what}) | {} | {fig} | {} |",
                Kind::Lockcore.name(),
                verdict(met)
            ),
        );
    }
    line(o, "");
}

fn implementations(o: &mut String) {
    line(o, "## Implementations");
    line(o, "");
    line(
        o,
        "| implementation | connection model | acquire / retry, as configured |",
    );
    line(o, "|---|---|---|");
    for kind in [
        Kind::Floor,
        Kind::FloorFenced,
        Kind::Lockcore,
        Kind::LockcoreHandoff,
        Kind::Rslock,
        Kind::AsyncRedisLock,
        Kind::Rlock,
    ] {
        let policy = kind.retry_policy();
        line(
            o,
            &format!(
                "| {} | {} | {} |",
                kind.name(),
                kind.connection_model(),
                policy
            ),
        );
    }
    line(o, "");
}

// ---------------------------------------------------------------------------------------------
// Scenario tables

fn setup_label(setup: B1Setup) -> String {
    if setup.same_cpu {
        format!("{} (server on the client's CPU)", setup.tasks)
    } else {
        setup.tasks.to_string()
    }
}

fn b1_table(o: &mut String, cfg: &Config, b1: &Result<B1, String>) {
    line(o, "## B1: uncontended acquire+release, distinct keys");
    line(o, "");
    line(
        o,
        &format!(
            "One manager (connection) per implementation, shared by T tasks, each task on its own key. A sample is one acquire+release. The floor + fencing token row acquires with one script call that also `INCR`s a counter, as any lock that mints fencing tokens must: the gap between the two floors is the price of fencing, not of lockcore. {:.1} s per cell, interleaved over {} rounds. Δ p50 = p50 − the floor's p50: the per-call cost over the floor, which a ratio dilutes as the round trip grows. Server CPU / op: the redis-server process's user+sys time (`INFO cpu`) during the cell, per sample; at 1 task it is mostly per-command syscalls, at 64 tasks (pipelined) mostly command and script work. Client CPU / op: the same for this process (all its threads, `/proc/self/task/*/schedstat`); client and server each have one CPU, so at 64 tasks the busier of the two sets the throughput. In a pinned run the last row group puts the server on the client's CPU: the shortest round trip loopback offers.",
            cfg.latency_cell.as_secs_f64(),
            cfg.rounds
        ),
    );
    line(o, "");
    let b1 = match b1 {
        Ok(b) => b,
        Err(e) => {
            line(o, &format!("B1 failed: {e}"));
            line(o, "");
            return;
        }
    };
    for (setup, rtt) in b1.setups.iter().zip(&b1.rtt) {
        if let Some(rtt) = rtt {
            line(
                o,
                &format!(
                    "- floor round trip (`PING` on the floor's connection), tasks {}: p50 {}, p99 {} ({} samples)",
                    setup_label(*setup),
                    fmt_dur(rtt.hist.p50()),
                    fmt_dur(rtt.hist.p99()),
                    rtt.hist.len()
                ),
            );
        }
    }
    line(o, "");
    line(
        o,
        "| implementation | tasks | p50 | p99 | ops/s | p50 / floor | Δ p50 | ops/s / floor | server CPU / op | client CPU / op | errors |",
    );
    line(o, "|---|---|---|---|---|---|---|---|---|---|---|");
    for (si, &setup) in b1.setups.iter().enumerate() {
        for row in &b1.rows {
            let cells = match &row.cells {
                Ok(c) => c,
                Err(e) => {
                    if si == 0 {
                        line(
                            o,
                            &format!("| {} | all | n/a: {e} | | | | | | | | |", row.kind.name()),
                        );
                    }
                    continue;
                }
            };
            let Some(c) = cells.get(si) else { continue };
            let floor = b1_cell(b1, Kind::Floor, setup);
            let floor_p50 = floor.and_then(|f| f.hist.p50());
            let delta = match (c.hist.p50(), floor_p50) {
                (Some(a), Some(f)) => {
                    let us = (a.as_secs_f64() - f.as_secs_f64()) * 1e6;
                    format!("{us:+.1} µs")
                }
                _ => "-".to_owned(),
            };
            line(
                o,
                &format!(
                    "| {} | {} | {} | {} | {} | {} | {delta} | {} | {} | {} | {}{} |",
                    row.kind.name(),
                    setup_label(setup),
                    fmt_dur(c.hist.p50()),
                    fmt_dur(c.hist.p99()),
                    c.ops_per_s().map_or("-".into(), fmt_rate),
                    ratio(secs(c.hist.p50()), secs(floor_p50)),
                    ratio(c.ops_per_s(), floor.and_then(Cycles::ops_per_s)),
                    fmt_dur(c.server_cpu_per_op()),
                    fmt_dur(c.client_cpu_per_op()),
                    c.errors,
                    c.first_error
                        .as_ref()
                        .map_or(String::new(), |e| format!(" ({})", short(e))),
                ),
            );
        }
    }
    line(o, "");
}

fn b2_table(o: &mut String, cfg: &Config, b2: &[Row<Vec<Contention>>]) {
    line(o, "## B2: one hot key, contenders with their own managers");
    line(o, "");
    line(
        o,
        &format!(
            "Each contender loops acquire → hold (tokio sleep; 0 = release at once) → release for {:.1} s on a fresh redis-server. acq/s counts acquisitions returned in the window. Lock busy = acq/s × mean hold as slept: the share of the window the lock was held, so 100 % is the most any lock can give at that hold (a 1 ms tokio sleep lasts 1-2 ms). Waits include timed-out calls at their full wait; calls still waiting at the end finish and count for commands/acquisition. Commands are those clients sent (`MONITOR` lines not tagged `lua`); script calls are `redis.call`s inside scripts. No floor: raw `SET NX PX` has no retry.",
            cfg.contention_cell.as_secs_f64()
        ),
    );
    line(o, "");
    line(
        o,
        "| implementation | contenders | hold (as slept) | acq/s | acq/s / rslock | lock busy | wait p50 | wait p99 | wait max | commands / acq | script calls / acq | Jain | timeouts | errors |",
    );
    line(
        o,
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    );
    let mut mismatch = Vec::new();
    for row in b2 {
        let cells = match &row.cells {
            Ok(c) => c,
            Err(e) => {
                line(
                    o,
                    &format!(
                        "| {} | all | | n/a: {e} | | | | | | | | | | |",
                        row.kind.name()
                    ),
                );
                continue;
            }
        };
        for c in cells {
            let rs = b2_cell(b2, Kind::Rslock, c.contenders, c.hold);
            if c.commands.unexplained() != 0 {
                mismatch.push(format!(
                    "{} {}×{} ms: total_commands_processed − seen = {}",
                    row.kind.name(),
                    c.contenders,
                    c.hold.as_millis(),
                    c.commands.unexplained()
                ));
            }
            line(
                o,
                &format!(
                    "| {} | {} | {} ms ({}) | {} | {} | {:.0} % | {} | {} | {} | {} | {} | {} | {} | {}{} |",
                    row.kind.name(),
                    c.contenders,
                    c.hold.as_millis(),
                    fmt_dur(Some(c.mean_hold)),
                    fmt_rate(c.per_s()),
                    ratio(Some(c.per_s()), rs.map(Contention::per_s)),
                    100.0 * c.busy(),
                    fmt_dur(c.waits.p50()),
                    fmt_dur(c.waits.p99()),
                    fmt_dur(c.waits.max()),
                    c.client_per_acq().map_or("-".into(), |v| format!("{v:.2}")),
                    c.lua_per_acq().map_or("-".into(), |v| format!("{v:.2}")),
                    jain(&c.per_contender).map_or("-".into(), |j| format!("{j:.3}")),
                    c.timeouts,
                    c.errors,
                    c.first_error
                        .as_ref()
                        .map_or(String::new(), |e| format!(" ({})", short(e))),
                ),
            );
        }
    }
    line(o, "");
    line(o, "Command mix per acquisition (client commands):");
    line(o, "");
    line(o, "| implementation | contenders | hold | mix |");
    line(o, "|---|---|---|---|");
    for row in b2 {
        let Ok(cells) = &row.cells else { continue };
        for c in cells {
            line(
                o,
                &format!(
                    "| {} | {} | {} ms | {} |",
                    row.kind.name(),
                    c.contenders,
                    c.hold.as_millis(),
                    c.commands.breakdown(c.acquisitions as f64)
                ),
            );
        }
    }
    line(o, "");
    if mismatch.is_empty() {
        line(
            o,
            "Cross-check: in every cell, client commands + script calls seen by `MONITOR` = the `total_commands_processed` delta.",
        );
    } else {
        line(
            o,
            &format!("Cross-check mismatches: {}.", mismatch.join("; ")),
        );
    }
    line(o, "");
}

fn b3_table(o: &mut String, cfg: &Config, b3: &Result<B3, String>) {
    line(o, "## B3: hand-off latency");
    line(o, "");
    line(
        o,
        &format!(
            "Two contenders (own managers) take turns on one key: while one holds (2-10 ms, uniform), the other waits in acquire. A sample is the time from the holder's release call to the waiter's acquire returning. Up to {} hand-offs or {:.1} s per implementation. The floor pushed hand-off is the least a pushed hand-off costs here: raw redis-rs, the release one script that hands the key to the one known waiter and `PUBLISH`es, the waiter's claim one script (no queue, no bookkeeping). The yardstick of the target is the floor's round trip: `PING` on a raw TCP_NODELAY connection to the same server, on the same runtime, measured before each implementation's turn, each after an idle pause like the holds (2-10 ms), as the hand-off comes after one. Back-to-back `PING`s (a busy loop keeps the CPU and the runtime awake) are shown for reference.",
            cfg.handoff_max,
            cfg.handoff_cell.as_secs_f64()
        ),
    );
    line(o, "");
    let b3 = match b3 {
        Ok(b) => b,
        Err(e) => {
            line(o, &format!("B3 failed: {e}"));
            line(o, "");
            return;
        }
    };
    let rtt = b3.rtt_idle.hist.p50();
    let hot = b3.rtt_hot.hist.p50();
    line(
        o,
        "| implementation | samples | p50 | p99 | max | p50 / idle RTT | p50 / back-to-back RTT | timeouts | errors |",
    );
    line(o, "|---|---|---|---|---|---|---|---|---|");
    let mut floors = vec![
        ("floor round trip, after idle pause (`PING`)", &b3.rtt_idle),
        ("floor round trip, back to back (`PING`)", &b3.rtt_hot),
    ];
    match &b3.raw_handoff {
        Ok(c) => floors.push((
            "floor pushed hand-off (raw redis-rs: release script hands over + `PUBLISH`, claim script)",
            c,
        )),
        Err(e) => line(o, &format!("(raw pushed hand-off failed: {e})")),
    }
    for (name, c) in floors {
        line(
            o,
            &format!(
                "| {name} | {} | {} | {} | {} | {} | {} | - | - |",
                c.hist.len(),
                fmt_dur(c.hist.p50()),
                fmt_dur(c.hist.p99()),
                fmt_dur(c.hist.max()),
                ratio(secs(c.hist.p50()), secs(rtt)),
                ratio(secs(c.hist.p50()), secs(hot)),
            ),
        );
    }
    for row in &b3.rows {
        match &row.cells {
            Ok(h) => line(
                o,
                &format!(
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {}{} |",
                    row.kind.name(),
                    h.hist.len(),
                    fmt_dur(h.hist.p50()),
                    fmt_dur(h.hist.p99()),
                    fmt_dur(h.hist.max()),
                    ratio(secs(h.hist.p50()), secs(rtt)),
                    ratio(secs(h.hist.p50()), secs(hot)),
                    h.timeouts,
                    h.errors,
                    h.first_error
                        .as_ref()
                        .map_or(String::new(), |e| format!(" ({})", short(e))),
                ),
            ),
            Err(e) => line(
                o,
                &format!("| {} | n/a: {e} | | | | | | | |", row.kind.name()),
            ),
        }
    }
    line(o, "");
}

fn b4_table(o: &mut String, cfg: &Config, b4: &[Row<Vec<Cycles>>]) {
    line(o, "## B4: Redlock, N = 1, 3, 5");
    line(o, "");
    line(
        o,
        &format!(
            "Five redis-server processes on this 2-core machine{}; N = 1 uses the first. One task, distinct keys, acquire+release; {:.1} s per cell, interleaved over {} rounds. The floor sends `SET NX PX` to all N in parallel, then `EVALSHA` to all N; its own N-scaling is what the machine allows (the servers' work does not run in parallel on one CPU), so p50 / floor at N isolates what the implementation adds.",
            if cfg.pin.is_some() {
                ", all pinned to the one server CPU"
            } else {
                ""
            },
            cfg.latency_cell.as_secs_f64(),
            cfg.rounds
        ),
    );
    line(o, "");
    line(
        o,
        "| implementation | N | p50 | p99 | p50 / own N=1 | p50 / floor at N | errors |",
    );
    line(o, "|---|---|---|---|---|---|---|");
    let floor = b4
        .iter()
        .find(|row| row.kind == Kind::Floor)
        .and_then(|row| row.cells.as_ref().ok());
    for row in b4 {
        let cells = match &row.cells {
            Ok(c) => c,
            Err(e) => {
                line(
                    o,
                    &format!("| {} | all | n/a: {e} | | | | |", row.kind.name()),
                );
                continue;
            }
        };
        let n1 = cells.first().and_then(|c| secs(c.hist.p50()));
        for (ni, n) in B4_NODES.iter().enumerate() {
            let Some(c) = cells.get(ni) else { continue };
            let f = floor
                .and_then(|f| f.get(ni))
                .and_then(|f| secs(f.hist.p50()));
            line(
                o,
                &format!(
                    "| {} | {n} | {} | {} | {} | {} | {}{} |",
                    row.kind.name(),
                    fmt_dur(c.hist.p50()),
                    fmt_dur(c.hist.p99()),
                    ratio(secs(c.hist.p50()), n1),
                    ratio(secs(c.hist.p50()), f),
                    c.errors,
                    c.first_error
                        .as_ref()
                        .map_or(String::new(), |e| format!(" ({})", short(e))),
                ),
            );
        }
    }
    line(o, "");
}

fn renewal_policy(kind: Kind) -> &'static str {
    match kind {
        Kind::Lockcore | Kind::LockcoreHandoff => {
            "`watchdog(true)`: every ttl/3 = 1 s, due renewals batched (≤ 512 keys per script call)"
        }
        Kind::AsyncRedisLock => "always on: one task per lock, every 1 s (default `extend`)",
        Kind::Rlock => "`RenewalMode::Auto` (default): one task per lock, every ttl/2 = 1.5 s",
        Kind::Rslock => {
            "`LockManager::using`: one call per lock, extends at validity − 500 ms ≈ 2.47 s"
        }
        Kind::Floor | Kind::FloorFenced => "-",
    }
}

fn b5_table(o: &mut String, cfg: &Config, b5: &[Row<Vec<Renewals>>]) {
    line(o, "## B5: watchdog cost");
    line(o, "");
    line(
        o,
        &format!(
            "Hold 1, 100 and 1,000 locks (ttl {} s) with each implementation's renewal, on its own fresh redis-server; count commands over a {:.1} s window that starts {:.2} s after the last acquire (`MONITOR`, as in B2). A window sees a whole number of renewal bursts, so a period that does not divide it (rslock) reads low or high by up to one burst.",
            B5_TTL.as_secs(),
            cfg.watchdog_window.as_secs_f64(),
            cfg.watchdog_settle.as_secs_f64()
        ),
    );
    line(o, "");
    line(
        o,
        "| implementation | renewal | locks | commands/s | script calls/s | mix (per s) | lost |",
    );
    line(o, "|---|---|---|---|---|---|---|");
    for row in b5 {
        let cells = match &row.cells {
            Ok(c) => c,
            Err(e) => {
                line(o, &format!("| {} | n/a: {e} | | | | | |", row.kind.name()));
                continue;
            }
        };
        for c in cells {
            line(
                o,
                &format!(
                    "| {} | {} | {} | {} | {} | {} | {} |",
                    row.kind.name(),
                    renewal_policy(row.kind),
                    c.locks,
                    fmt_rate(c.client_per_s()),
                    fmt_rate(c.lua_per_s()),
                    c.commands.breakdown(c.window.as_secs_f64()),
                    c.lost
                ),
            );
        }
    }
    line(o, "");
}

/// An error message short enough for a table cell, without `|`.
fn short(e: &str) -> String {
    let e = e.replace('|', "/").replace('\n', " ");
    if e.chars().count() > 80 {
        let cut: String = e.chars().take(77).collect();
        format!("{cut}...")
    } else {
        e
    }
}
