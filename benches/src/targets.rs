//! The targets table: each target with its figure from this run, met or missed.
//! What each target is checked against is in `benches/README.md`, "Targets".

use std::time::Duration;

use crate::b1::{B1, B1Setup};
use crate::b2::{Contention, find_contention};
use crate::b4::b4_floor;
use crate::lockers::Kind;
use crate::results::Results;
use crate::scenarios::cells_of;
use crate::stats::{delta, fmt_dur, fmt_rate};
use crate::table::Table;
use lockcore_tests::stats::jain;

/// B5's figures for lockcore's default at 1,000 locks in the baseline run before the client-cost work (RESULTS.md of
/// 2026-12-01 02:39): client commands/s, and all Redis calls/s (script-internal included).
const B5_BEFORE: (f64, f64) = (2.00, 2002.0);

struct Targets(Table);

impl Targets {
    fn check(&mut self, target: &str, kind: Kind, figure: Option<(String, bool)>) {
        let (figure, verdict) = match figure {
            Some((f, true)) => (f, "met"),
            Some((f, false)) => (f, "**missed**"),
            None => ("-".to_owned(), "not measured"),
        };
        self.0.push_row([target, kind.name(), &figure, verdict]);
    }
}

/// "1.02× (91 532 vs 89 000 ops/s)" and whether `a / b` is within `bound` (`at_least`: ≥).
fn compare(a: f64, b: f64, bound: f64, at_least: bool, text: String) -> (String, bool) {
    let r = a / b;
    let met = if at_least { r >= bound } else { r <= bound };
    (format!("{:.2}× ({text})", r), met)
}

pub(crate) fn render(o: &mut String, r: &Results) {
    o.push_str(
        "## Targets\n\nMethod: `benches/README.md`, \"Targets\". All figures from this run.\n\n",
    );
    let mut t = Targets(Table::new("target | implementation | figure | result"));
    let b1 = r.b1.as_ref().and_then(|b| b.as_ref().ok());
    b1_targets(&mut t, b1);
    let default = Kind::LockcoreHandoff;
    let b2 = r.b2.as_deref();
    for hold in [Duration::ZERO, Duration::from_millis(1)] {
        let ms = hold.as_millis();
        let ours = b2.and_then(|b| find_contention(b, default, 8, hold));
        let rs = b2.and_then(|b| find_contention(b, Kind::Rslock, 8, hold));
        let both = ours.zip(rs);
        t.check(
            &format!("B2 8 contenders, hold {ms} ms: acquisitions/s ≥ 1.0× rslock"),
            default,
            both.map(|(a, b)| {
                let text = format!("{} vs {} /s", fmt_rate(a.per_s()), fmt_rate(b.per_s()));
                compare(a.per_s(), b.per_s(), 1.0, true, text)
            }),
        );
        t.check(
            &format!("B2 8 contenders, hold {ms} ms: Jain ≥ 0.95"),
            default,
            ours.and_then(|a| jain(&a.per_contender))
                .map(|j| (format!("{j:.3}"), j >= 0.95)),
        );
        t.check(
            &format!("B2 8 contenders, hold {ms} ms: wait p99 below rslock's"),
            default,
            both.and_then(|(a, b)| Some((a.waits.p99()?, b.waits.p99()?)))
                .map(|(a, b)| {
                    (
                        format!("{} vs {}", fmt_dur(Some(a)), fmt_dur(Some(b))),
                        a < b,
                    )
                }),
        );
        t.check(
            &format!("B2 8 contenders, hold {ms} ms: ≤ 3 client commands / acquisition"),
            default,
            ours.and_then(|a| Some((a.client_per_acq()?, a)))
                .map(|(c, a)| {
                    let mix = a.commands.breakdown(a.acquisitions as f64);
                    (format!("{c:.2} ({mix})"), c <= 3.0)
                }),
        );
        let all = |c: &Contention| Some(c.client_per_acq()? + c.lua_per_acq()?);
        t.check(
            &format!("B2 8 contenders, hold {ms} ms: ≤ 10 Redis calls / acquisition, script-internal included"),
            default,
            ours.and_then(all).map(|c| {
                let rs = rs.and_then(all).map_or("-".into(), |v| format!("{v:.2}"));
                (format!("{c:.2}; rslock {rs}"), c <= 10.0)
            }),
        );
    }
    let b3 = r.b3.as_ref().and_then(|b| b.as_ref().ok());
    let ours = b3.and_then(|b| cells_of(&b.rows, default)?.hist.p50());
    for (yardstick, idle) in [("after an idle pause", true), ("back to back", false)] {
        let rtt = b3.and_then(|b| if idle { &b.rtt_idle } else { &b.rtt_hot }.hist.p50());
        let figure = ours.zip(rtt).map(|(a, p)| {
            let text = format!("{} vs {}", fmt_dur(Some(a)), fmt_dur(Some(p)));
            compare(a.as_secs_f64(), p.as_secs_f64(), 1.0, false, text)
        });
        let target = format!("B3 hand-off p50 ≤ 1.0× a `PING` {yardstick}");
        if idle {
            t.check(&target, default, figure);
        } else {
            let figure = figure.map_or("-".to_owned(), |(f, _)| f);
            let target = format!("B3 hand-off p50 against a `PING` {yardstick} (reported)");
            t.0.push_row([target.as_str(), default.name(), &figure, "reported"]);
        }
    }
    let b4 = r.b4.as_deref().and_then(|b4| {
        let ours = cells_of(b4, Kind::Lockcore)?.get(2)?;
        let (floor_kind, floor) = b4_floor(b4, 2)?;
        Some((ours.hist.p50()?, floor.hist.p50()?, floor_kind))
    });
    t.check(
        "B4 Redlock N=5: p50 ≤ 1.0× the floor at N=5",
        Kind::Lockcore,
        b4.map(|(a, f, k)| {
            let text = format!(
                "{} vs {} ({})",
                fmt_dur(Some(a)),
                fmt_dur(Some(f)),
                k.name()
            );
            compare(a.as_secs_f64(), f.as_secs_f64(), 1.0, false, text)
        }),
    );
    let b5 =
        r.b5.as_deref()
            .and_then(|b5| cells_of(b5, default)?.iter().find(|c| c.locks == 1000));
    t.check(
        "B5 1,000 locks: no regression (client commands/s, all Redis calls/s ≤ the run before, +1 %)",
        default,
        b5.map(|c| {
            let (client, all) = (c.client_per_s(), c.client_per_s() + c.lua_per_s());
            let figure = format!(
                "{} and {} /s over {:.1} s (before: {} and {} over 6.0 s)",
                fmt_rate(client),
                fmt_rate(all),
                c.window.as_secs_f64(),
                fmt_rate(B5_BEFORE.0),
                fmt_rate(B5_BEFORE.1)
            );
            (figure, client <= 1.01 * B5_BEFORE.0 && all <= 1.01 * B5_BEFORE.1)
        }),
    );
    t.0.render(o);
}

fn b1_targets(t: &mut Targets, b1: Option<&B1>) {
    let at64 = B1Setup::tasks(64);
    let cell = |kind, setup| b1.and_then(|b| b.cell(kind, setup));
    let floor = |fenced, setup| b1.and_then(|b| b.floor(fenced, setup));
    // (implementation, what it is held to, that one's name in the target)
    let ops = [
        (Kind::LockcoreHandoff, floor(true, at64), "the fenced floor"),
        (Kind::LockcoreFencingOff, floor(false, at64), "the floor"),
        (
            Kind::LockcoreFencingOff,
            cell(Kind::Rslock, at64).map(|c| (Kind::Rslock, c)),
            "rslock",
        ),
    ];
    for (kind, against, who) in ops {
        t.check(
            &format!("B1 64 tasks: ops/s ≥ 1.0× {who}"),
            kind,
            cell(kind, at64).zip(against).and_then(|(a, (k, b))| {
                let (a, b) = (a.ops_per_s()?, b.ops_per_s()?);
                let text = format!("{} vs {} ops/s, {}", fmt_rate(a), fmt_rate(b), k.name());
                Some(compare(a, b, 1.0, true, text))
            }),
        );
    }
    for (kind, fenced, who) in [
        (Kind::LockcoreHandoff, true, "the fenced floor's"),
        (Kind::LockcoreFencingOff, false, "the floor's"),
    ] {
        t.check(
            &format!("B1 64 tasks: server CPU / op ≤ 1.1× {who}"),
            kind,
            cell(kind, at64)
                .zip(floor(fenced, at64))
                .and_then(|(a, (k, b))| {
                    let (a, b) = (a.server_cpu_per_op()?, b.server_cpu_per_op()?);
                    let text =
                        format!("{} vs {}, {}", fmt_dur(Some(a)), fmt_dur(Some(b)), k.name());
                    Some(compare(a.as_secs_f64(), b.as_secs_f64(), 1.1, false, text))
                }),
        );
    }
    let at1 = B1Setup::tasks(1);
    let default = Kind::LockcoreHandoff;
    t.check(
        "B1 1 task: p50 ≤ 1.03× the fenced floor",
        default,
        cell(default, at1)
            .zip(floor(true, at1))
            .and_then(|(a, (k, f))| {
                let (a, f) = (a.hist.p50()?, f.hist.p50()?);
                let text = format!(
                    "{} vs {}: {}, {}",
                    fmt_dur(Some(a)),
                    fmt_dur(Some(f)),
                    delta(Some(a), Some(f)),
                    k.name()
                );
                Some(compare(a.as_secs_f64(), f.as_secs_f64(), 1.03, false, text))
            }),
    );
}
