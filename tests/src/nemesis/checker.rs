//! The checker: what the merged history, the fault log and the final state say.
//!
//! - **Token order**: per resource, no write accepted with a token lower than that of a write
//!   accepted before it was invoked.
//! - **Overlap**: per key, no two leases (acquire reply to release invoke or deadline) that
//!   overlap in time and both got a write accepted.
//! - **Lost updates**: per resource, the final count equals the writes that happened: the
//!   accepted ones plus the unknown ones resolved as applied.
//! - **Unknown writes** are resolved by what was read later: every value carries the token of
//!   the write that made it, so a write whose reply was lost happened exactly when a later
//!   claim (or the final state) saw its value with its token.
//! - **Recovery**: after each fault's heal, the time to the next accepted write.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::faults::{FaultKind, FaultRecord};
use super::resources::Seen;
use crate::history::{Event, Fun, OpId, Phase};

/// One operation assembled from its steps.
#[derive(Debug, Default, Clone)]
pub struct Lease {
    /// The lock key.
    pub key: String,
    /// Acquire reply.
    pub start_ns: u64,
    /// Release invoke or deadline, whichever came first.
    pub end_ns: u64,
    /// Its fencing token.
    pub fencing_token: u64,
    /// A write of this lease was accepted.
    pub accepted: bool,
}

/// A write as the history shows it.
#[derive(Debug, Clone)]
struct Write {
    id: OpId,
    invoke_ns: u64,
    done_ns: Option<u64>,
    phase: Phase,
    token: u64,
    value: i64,
}

/// What the checker found.
#[derive(Debug, Default, Clone)]
pub struct Findings {
    /// Operations (acquire invokes).
    pub ops: usize,
    /// Acquires that returned a lease.
    pub acquired: usize,
    /// Writes accepted.
    pub writes_ok: usize,
    /// Writes rejected (stale) or failed.
    pub writes_failed: usize,
    /// Writes with a lost reply or no completion.
    pub unknown: usize,
    /// ... of which resolved as applied.
    pub unknown_applied: usize,
    /// Operations cut by a dropped future (released from `Drop`).
    pub dropped: usize,
    /// Writes accepted out of token order.
    pub order_violations: usize,
    /// Overlapping leases that both wrote.
    pub overlap_violations: usize,
    /// Final counts above the writes that happened (phantom writes).
    pub phantom: i64,
    /// Writes that happened but are missing from the final counts.
    pub lost_updates: i64,
    /// Leases, for the picture.
    pub leases: Vec<Lease>,
    /// Recovery after each fault, in ms (`None`: no write until the end).
    pub recovery_ms: Vec<(FaultKind, Option<u64>)>,
}

impl Findings {
    /// Every violation: out of order, overlap, phantom.
    pub fn violations(&self) -> usize {
        self.order_violations + self.overlap_violations + usize::try_from(self.phantom).unwrap_or(0)
    }
}

/// Checks `events` (merged, sorted by time) against the faults and the final values (per
/// `(resource, key)`); `end_ns` closes leases and recovery windows.
pub fn check(
    events: &[Event],
    faults: &[FaultRecord],
    finals: &BTreeMap<(String, String), Seen>,
    end_ns: u64,
) -> Findings {
    let mut findings = Findings::default();
    let mut leases: BTreeMap<OpId, Lease> = BTreeMap::new();
    let mut writes: HashMap<(String, String), Vec<Write>> = HashMap::new();
    let mut seen: HashMap<(String, String), HashSet<(i64, u64)>> = HashMap::new();
    let mut ok_times = Vec::new();
    for e in events {
        let id = e.id();
        let resource = || (e.resource.clone().unwrap_or_default(), e.key.clone());
        match (e.fun, e.phase) {
            (Fun::Acquire, Phase::Invoke) => findings.ops += 1,
            (Fun::Acquire, Phase::Ok) => {
                findings.acquired += 1;
                let deadline = e.deadline_ns.unwrap_or(e.t_ns);
                leases.insert(
                    id,
                    Lease {
                        key: e.key.clone(),
                        start_ns: e.t_ns,
                        end_ns: deadline.max(e.t_ns),
                        fencing_token: e.fencing_token.unwrap_or(0),
                        accepted: false,
                    },
                );
            }
            (Fun::Release, Phase::Invoke) => {
                if e.note.as_deref() == Some("dropped") {
                    findings.dropped += 1;
                }
                if let Some(lease) = leases.get_mut(&id) {
                    lease.end_ns = lease.end_ns.min(e.t_ns).max(lease.start_ns);
                }
            }
            (Fun::Claim, Phase::Ok) => {
                if let (Some(count), Some(writer)) = (e.read, e.writer) {
                    seen.entry(resource()).or_default().insert((count, writer));
                }
            }
            (Fun::Write, Phase::Invoke) => writes.entry(resource()).or_default().push(Write {
                id,
                invoke_ns: e.t_ns,
                done_ns: None,
                phase: Phase::Invoke,
                token: e.fencing_token.unwrap_or(0),
                value: e.value.unwrap_or(0),
            }),
            (Fun::Write, phase) => {
                if let Some(w) = writes
                    .get_mut(&resource())
                    .and_then(|ws| ws.iter_mut().rev().find(|w| w.id == id))
                {
                    w.done_ns = Some(e.t_ns);
                    w.phase = phase;
                }
                if phase == Phase::Ok {
                    ok_times.push(e.t_ns);
                    if let Some(lease) = leases.get_mut(&id) {
                        lease.accepted = true;
                    }
                }
            }
            _ => {}
        }
    }
    for (resource, ws) in &writes {
        let final_seen = finals.get(resource).copied().unwrap_or(Seen {
            count: 0,
            writer: 0,
        });
        let reads = seen.get(resource);
        let mut happened: i64 = 0;
        for w in ws {
            match w.phase {
                Phase::Ok => {
                    findings.writes_ok += 1;
                    happened += 1;
                }
                Phase::Fail => findings.writes_failed += 1,
                Phase::Invoke | Phase::Unknown => {
                    findings.unknown += 1;
                    let value = (w.value, w.token);
                    let applied = reads.is_some_and(|r| r.contains(&value))
                        || (final_seen.count, final_seen.writer) == value;
                    if applied {
                        findings.unknown_applied += 1;
                        happened += 1;
                    }
                }
            }
        }
        findings.lost_updates += (happened - final_seen.count).max(0);
        findings.phantom += (final_seen.count - happened).max(0);
        findings.order_violations += out_of_order(ws);
    }
    findings.overlap_violations = overlaps(leases.values());
    ok_times.sort_unstable();
    findings.recovery_ms = faults
        .iter()
        .map(|f| {
            let next = ok_times.partition_point(|&t| t <= f.heal_ns);
            let recovered = ok_times.get(next).copied().filter(|&t| t <= end_ns);
            (f.kind, recovered.map(|t| (t - f.heal_ns) / 1_000_000))
        })
        .collect();
    findings.leases = leases.into_values().collect();
    findings
}

/// Accepted writes whose token is below that of a write accepted before they were invoked.
fn out_of_order(writes: &[Write]) -> usize {
    let mut accepted: Vec<&Write> = writes.iter().filter(|w| w.phase == Phase::Ok).collect();
    let mut by_done: Vec<(u64, u64)> = accepted
        .iter()
        .map(|w| (w.done_ns.unwrap_or(w.invoke_ns), w.token))
        .collect();
    by_done.sort_unstable();
    accepted.sort_by_key(|w| w.invoke_ns);
    let (mut next, mut newest, mut count) = (0, 0, 0);
    for w in accepted {
        while next < by_done.len() && by_done[next].0 < w.invoke_ns {
            newest = newest.max(by_done[next].1);
            next += 1;
        }
        if w.token < newest {
            count += 1;
        }
    }
    count
}

/// Leases that overlap an earlier lease on the same key, both with an accepted write.
fn overlaps<'a>(leases: impl Iterator<Item = &'a Lease>) -> usize {
    let mut per_key: HashMap<&str, Vec<&Lease>> = HashMap::new();
    for lease in leases.filter(|l| l.accepted) {
        per_key.entry(&lease.key).or_default().push(lease);
    }
    let mut count = 0;
    for list in per_key.values_mut() {
        list.sort_by_key(|l| l.start_ns);
        let mut end = 0;
        for lease in list.iter() {
            if lease.start_ns < end {
                count += 1;
            }
            end = end.max(lease.end_ns);
        }
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(id: u64, t: u64, fun: Fun, phase: Phase) -> Event {
        let op = OpId {
            process: 0,
            incarnation: 0,
            task: 0,
            op: id,
        };
        Event {
            t_ns: t,
            ..Event::now(op, "k", fun, phase)
        }
    }

    fn lease_with_write(id: u64, start: u64, end: u64, token: u64, read: i64) -> Vec<Event> {
        let write = |t, phase| Event {
            resource: Some("counter".into()),
            fencing_token: Some(token),
            value: Some(read + 1),
            ..ev(id, t, Fun::Write, phase)
        };
        vec![
            ev(id, start - 1, Fun::Acquire, Phase::Invoke),
            Event {
                deadline_ns: Some(end + 1_000),
                fencing_token: Some(token),
                ..ev(id, start, Fun::Acquire, Phase::Ok)
            },
            write(start + 1, Phase::Invoke),
            write(start + 2, Phase::Ok),
            ev(id, end, Fun::Release, Phase::Invoke),
        ]
    }

    fn finals(count: i64, writer: u64) -> BTreeMap<(String, String), Seen> {
        BTreeMap::from([(("counter".into(), "k".into()), Seen { count, writer })])
    }

    #[test]
    fn a_clean_history_has_no_violation() {
        let mut events = lease_with_write(1, 10, 20, 1, 0);
        events.extend(lease_with_write(2, 30, 40, 2, 1));
        let f = check(&events, &[], &finals(2, 2), 100);
        assert_eq!((f.violations(), f.lost_updates, f.writes_ok), (0, 0, 2));
    }

    #[test]
    fn overlap_out_of_order_and_lost_update_are_caught() {
        let mut events = lease_with_write(1, 10, 50, 2, 0);
        // Overlaps lease 1, writes after it with an older token, and read the same value.
        events.extend(lease_with_write(2, 20, 60, 1, 0));
        events.sort_by_key(|e| e.t_ns);
        let f = check(&events, &[], &finals(1, 1), 100);
        assert_eq!(f.overlap_violations, 1);
        assert_eq!(f.order_violations, 1);
        assert_eq!(f.lost_updates, 1);
    }

    #[test]
    fn an_unknown_write_is_resolved_by_the_final_value() {
        let mut events = lease_with_write(1, 10, 20, 1, 0);
        events.retain(|e| !(e.fun == Fun::Write && e.phase == Phase::Ok));
        let applied = check(&events, &[], &finals(1, 1), 100);
        assert_eq!((applied.unknown, applied.unknown_applied), (1, 1));
        assert_eq!(applied.lost_updates + applied.phantom, 0);
        let not_applied = check(&events, &[], &finals(0, 0), 100);
        assert_eq!((not_applied.unknown, not_applied.unknown_applied), (1, 0));
        assert_eq!(not_applied.lost_updates + not_applied.phantom, 0);
    }
}
