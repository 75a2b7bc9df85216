//! One table per scenario, built from the figures of this run. The method behind each one is
//! in `benches/README.md`; each table has a one-line caption pointing there.

use std::fmt::Write as _;

use crate::b1::{B1, B1Setup};
use crate::b2::{Contention, find_contention};
use crate::b3::B3;
use crate::b4::{B4_NODES, b4_floor};
use crate::b5::{B5_TTL, Renewals};
use crate::b6::{B6, B6_TASKS};
use crate::lockers::Kind;
use crate::scenarios::{Cycles, Row};
use crate::stats::{Hist, delta, fmt_dur, fmt_rate, ratio, secs};
use crate::table::{Table, errors};
use lockcore_tests::stats::jain;

const README: &str = "`benches/README.md`";

/// A heading and the one-line caption that points to the README section.
pub(crate) fn section(o: &mut String, title: &str, readme: &str) {
    let _ = write!(o, "## {title}\n\nMethod: {README}, {readme}.\n\n");
}

fn failed(o: &mut String, what: &str, e: &str) {
    let _ = write!(o, "{what} failed: {e}\n\n");
}

fn setup_label(setup: B1Setup) -> String {
    if setup.same_cpu {
        format!("{} (server on the client's CPU)", setup.tasks)
    } else {
        setup.tasks.to_string()
    }
}

fn rate(c: &Cycles) -> String {
    c.ops_per_s().map_or("-".into(), fmt_rate)
}

pub(crate) fn b1_table(o: &mut String, b1: &Result<B1, String>) {
    section(
        o,
        "B1: uncontended acquire+release, distinct keys",
        "\"B1\"",
    );
    let b1 = match b1 {
        Ok(b) => b,
        Err(e) => return failed(o, "B1", e),
    };
    let mut floors = Table::new("tasks | the floor | the fenced floor | `PING` p50 / p99");
    for (&setup, rtt) in b1.setups.iter().zip(&b1.rtt) {
        let name = |fenced| b1.floor(fenced, setup).map_or("-", |(k, _)| k.name());
        let rtt = rtt.as_ref().map_or("-".into(), |c| {
            format!("{} / {}", fmt_dur(c.hist.p50()), fmt_dur(c.hist.p99()))
        });
        floors.push_row([
            setup_label(setup),
            name(false).into(),
            name(true).into(),
            rtt,
        ]);
    }
    floors.render(o);
    let mut t = Table::new(
        "implementation | tasks | p50 | p99 | ops/s | p50 / floor | Δ p50 | ops/s / floor | server CPU / op | client CPU / op | errors",
    );
    for (si, &setup) in b1.setups.iter().enumerate() {
        let floor = b1.floor(false, setup).map(|(_, c)| c);
        let floor_p50 = floor.and_then(|f| f.hist.p50());
        for row in &b1.rows {
            let c = match &row.cells {
                Ok(cells) => match cells.get(si) {
                    Some(c) => c,
                    None => continue,
                },
                Err(e) if si == 0 => {
                    t.push_failed(row.kind.name(), e);
                    continue;
                }
                Err(_) => continue,
            };
            t.push_row([
                row.kind.name().to_owned(),
                setup_label(setup),
                fmt_dur(c.hist.p50()),
                fmt_dur(c.hist.p99()),
                rate(c),
                ratio(secs(c.hist.p50()), secs(floor_p50)),
                delta(c.hist.p50(), floor_p50),
                ratio(c.ops_per_s(), floor.and_then(Cycles::ops_per_s)),
                fmt_dur(c.server_cpu_per_op()),
                fmt_dur(c.client_cpu_per_op()),
                errors(c.errors, c.first_error.as_ref()),
            ]);
        }
    }
    t.render(o);
}

pub(crate) fn b2_table(o: &mut String, b2: &[Row<Vec<Contention>>]) {
    section(
        o,
        "B2: one hot key, contenders with their own managers",
        "\"B2\"",
    );
    let mut t = Table::new(
        "implementation | contenders | hold (as slept) | acq/s | acq/s / rslock | lock busy | wait p50 | wait p99 | wait max | commands / acq | script calls / acq | command mix / acq | Jain | timeouts | errors",
    );
    let mut mismatch = Vec::new();
    for row in b2 {
        let cells = match &row.cells {
            Ok(c) => c,
            Err(e) => {
                t.push_failed(row.kind.name(), e);
                continue;
            }
        };
        for c in cells {
            let rs = find_contention(b2, Kind::Rslock, c.contenders, c.hold);
            let hold = c.hold.as_millis();
            if c.commands.unexplained() != 0 {
                mismatch.push(format!(
                    "{} {}×{hold} ms: {}",
                    row.kind.name(),
                    c.contenders,
                    c.commands.unexplained()
                ));
            }
            let per = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.2}"));
            t.push_row([
                row.kind.name().to_owned(),
                c.contenders.to_string(),
                format!("{hold} ms ({})", fmt_dur(Some(c.mean_hold))),
                fmt_rate(c.per_s()),
                ratio(Some(c.per_s()), rs.map(Contention::per_s)),
                format!("{:.0} %", 100.0 * c.busy()),
                fmt_dur(c.waits.p50()),
                fmt_dur(c.waits.p99()),
                fmt_dur(c.waits.max()),
                per(c.client_per_acq()),
                per(c.lua_per_acq()),
                c.commands.breakdown(c.acquisitions as f64),
                jain(&c.per_contender).map_or("-".into(), |j| format!("{j:.3}")),
                c.timeouts.to_string(),
                errors(c.errors, c.first_error.as_ref()),
            ]);
        }
    }
    t.render(o);
    let check = if mismatch.is_empty() {
        "every cell matches".to_owned()
    } else {
        format!("mismatches (unexplained commands): {}", mismatch.join("; "))
    };
    let _ = write!(o, "`total_commands_processed` cross-check: {check}.\n\n");
}

pub(crate) fn b3_table(o: &mut String, b3: &Result<B3, String>) {
    section(o, "B3: hand-off latency", "\"B3\"");
    let b3 = match b3 {
        Ok(b) => b,
        Err(e) => return failed(o, "B3", e),
    };
    let (idle, hot) = (b3.rtt_idle.hist.p50(), b3.rtt_hot.hist.p50());
    let mut t = Table::new(
        "implementation | samples | p50 | p99 | max | p50 / idle `PING` | p50 / back-to-back `PING` | timeouts | errors",
    );
    let row = |name: &str, h: &Hist, timeouts: String, errs: String| {
        [
            name.to_owned(),
            h.len().to_string(),
            fmt_dur(h.p50()),
            fmt_dur(h.p99()),
            fmt_dur(h.max()),
            ratio(secs(h.p50()), secs(idle)),
            ratio(secs(h.p50()), secs(hot)),
            timeouts,
            errs,
        ]
    };
    let none = || "-".to_owned();
    t.push_row(row(
        "`PING` after an idle pause",
        &b3.rtt_idle.hist,
        none(),
        none(),
    ));
    t.push_row(row("`PING` back to back", &b3.rtt_hot.hist, none(), none()));
    match &b3.raw_handoff {
        Ok(c) => t.push_row(row("raw pushed hand-off", &c.hist, none(), none())),
        Err(e) => t.push_failed("raw pushed hand-off", e),
    }
    for r in &b3.rows {
        match &r.cells {
            Ok(h) => {
                let errs = errors(h.errors, h.first_error.as_ref());
                t.push_row(row(r.kind.name(), &h.hist, h.timeouts.to_string(), errs));
            }
            Err(e) => t.push_failed(r.kind.name(), e),
        }
    }
    t.render(o);
}

pub(crate) fn b4_table(o: &mut String, b4: &[Row<Vec<Cycles>>]) {
    section(o, "B4: Redlock, N = 1, 3, 5", "\"B4\"");
    let mut t =
        Table::new("implementation | N | p50 | p99 | p50 / own N=1 | p50 / floor at N | errors");
    for row in b4 {
        let cells = match &row.cells {
            Ok(c) => c,
            Err(e) => {
                t.push_failed(row.kind.name(), e);
                continue;
            }
        };
        let n1 = cells.first().and_then(|c| secs(c.hist.p50()));
        for (ni, (n, c)) in B4_NODES.iter().zip(cells).enumerate() {
            let floor = b4_floor(b4, ni).and_then(|(_, f)| secs(f.hist.p50()));
            t.push_row([
                row.kind.name().to_owned(),
                n.to_string(),
                fmt_dur(c.hist.p50()),
                fmt_dur(c.hist.p99()),
                ratio(secs(c.hist.p50()), n1),
                ratio(secs(c.hist.p50()), floor),
                errors(c.errors, c.first_error.as_ref()),
            ]);
        }
    }
    t.render(o);
    let floors: Vec<String> = (0..B4_NODES.len())
        .map(|ni| {
            let name = b4_floor(b4, ni).map_or("-", |(k, _)| k.name());
            format!("N={}: {name}", B4_NODES[ni])
        })
        .collect();
    let _ = write!(o, "The floor at N: {}.\n\n", floors.join(", "));
}

fn renewal_policy(kind: Kind) -> &'static str {
    match kind {
        Kind::Lockcore
        | Kind::LockcoreHandoff
        | Kind::LockcoreFencingOff
        | Kind::LockcoreSemaphore => {
            "`watchdog(true)`: every ttl/3, due renewals batched (≤ 512 keys per script call)"
        }
        Kind::AsyncRedisLock => "always on: one task per lock, every 1 s (default `extend`)",
        Kind::Rlock => "`RenewalMode::Auto` (default): one task per lock, every ttl/2",
        Kind::Rslock => "`LockManager::using`: one call per lock, extends at validity − 500 ms",
        _ => "-",
    }
}

pub(crate) fn b5_table(o: &mut String, b5: &[Row<Vec<Renewals>>]) {
    section(
        o,
        &format!("B5: watchdog cost (ttl {} s)", B5_TTL.as_secs()),
        "\"B5\"",
    );
    let mut t = Table::new(
        "implementation | renewal | locks | commands/s | script calls/s | mix (per s) | lost",
    );
    for row in b5 {
        match &row.cells {
            Ok(cells) => {
                for c in cells {
                    t.push_row([
                        row.kind.name().to_owned(),
                        renewal_policy(row.kind).to_owned(),
                        c.locks.to_string(),
                        fmt_rate(c.client_per_s()),
                        fmt_rate(c.lua_per_s()),
                        c.commands.breakdown(c.window.as_secs_f64()),
                        c.lost.to_string(),
                    ]);
                }
            }
            Err(e) => t.push_failed(row.kind.name(), e),
        }
    }
    t.render(o);
}

pub(crate) fn b6_tables(o: &mut String, b6: &B6) {
    section(
        o,
        "B6 (a): the cost of `wait_for_replicas`, one replica",
        "\"B6\"",
    );
    match &b6.replicas {
        Err(e) => failed(o, "B6 (a)", e),
        Ok(rows) => {
            let mut t =
                Table::new("manager | tasks | p50 | p99 | ops/s | p50 / without | Δ p50 | errors");
            for (ti, tasks) in B6_TASKS.iter().enumerate() {
                let base = rows.first().and_then(|(_, c)| c.get(ti)?.hist.p50());
                for (name, cells) in rows {
                    let Some(c) = cells.get(ti) else { continue };
                    t.push_row([
                        (*name).to_owned(),
                        tasks.to_string(),
                        fmt_dur(c.hist.p50()),
                        fmt_dur(c.hist.p99()),
                        rate(c),
                        ratio(secs(c.hist.p50()), secs(base)),
                        delta(c.hist.p50(), base),
                        errors(c.errors, c.first_error.as_ref()),
                    ]);
                }
            }
            t.render(o);
        }
    }
    section(
        o,
        "B6 (b): hand-off and acquire+release on a Redis Cluster",
        "\"B6\"",
    );
    let mut t = Table::new(
        "topology (lockcore default) | hand-offs | hand-off p50 | hand-off p99 | hand-off p50 / single node | acquire+release p50 | acquire+release p99 | ops/s (1 task) | errors",
    );
    let single = b6.topologies.first().and_then(|t| t.result.as_ref().ok());
    let single = single.and_then(|(h, _)| h.hist.p50());
    for topo in &b6.topologies {
        match &topo.result {
            Ok((h, c)) => t.push_row([
                topo.name.to_owned(),
                h.hist.len().to_string(),
                fmt_dur(h.hist.p50()),
                fmt_dur(h.hist.p99()),
                ratio(secs(h.hist.p50()), secs(single)),
                fmt_dur(c.hist.p50()),
                fmt_dur(c.hist.p99()),
                rate(c),
                errors(
                    h.errors + h.timeouts + c.errors,
                    h.first_error.as_ref().or(c.first_error.as_ref()),
                ),
            ]),
            Err(e) => t.push_failed(topo.name, e),
        }
    }
    t.render(o);
}
