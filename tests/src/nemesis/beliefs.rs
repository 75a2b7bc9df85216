//! The checker of the share workloads (`family`): what holders believed, from their ledger
//! lines (`enter <role> <token> <start_ns> <deadline_ns>`, `exit <end_ns> <deadline_ns>`, and
//! the coordinator's `killed <ns>`), how many believed at once, and which overlapped a writer.

use super::procs::Ledger;

/// A holder's belief: from its entry to its exit or deadline, whichever is first.
#[derive(Debug, Clone, Copy)]
pub(super) struct Belief {
    write: bool,
    start: u64,
    end: u64,
}

/// The holders' beliefs from the ledger: an `exit` ends the worker's open one at the earlier
/// of its time and deadline, a `killed` at the earlier of the kill and the entry's deadline;
/// one open at the end ends at its deadline or `end_ns`.
pub(super) fn beliefs(ledger: &Ledger, end_ns: u64) -> Vec<Belief> {
    let mut open: std::collections::BTreeMap<usize, (Belief, u64)> = Default::default();
    let mut done = Vec::new();
    let num = |word: Option<&str>| word.and_then(|w| w.parse::<u64>().ok());
    for (index, line) in &ledger.lines {
        let mut words = line.split(' ');
        match words.next() {
            Some("enter") => {
                let write = words.next() == Some("write");
                let _token = words.next();
                let (Some(start), Some(deadline)) = (num(words.next()), num(words.next())) else {
                    continue;
                };
                let belief = Belief {
                    write,
                    start,
                    end: start,
                };
                open.insert(*index, (belief, deadline));
            }
            Some("exit") => {
                let (Some(at), Some(deadline)) = (num(words.next()), num(words.next())) else {
                    continue;
                };
                if let Some((mut belief, _)) = open.remove(index) {
                    belief.end = at.min(deadline);
                    done.push(belief);
                }
            }
            Some("killed") => {
                if let (Some(at), Some((mut belief, deadline))) =
                    (num(words.next()), open.remove(index))
                {
                    belief.end = at.min(deadline);
                    done.push(belief);
                }
            }
            _ => {}
        }
    }
    done.extend(open.into_values().map(|(mut belief, deadline)| {
        belief.end = deadline.min(end_ns);
        belief
    }));
    done
}

/// The most beliefs at once, and the entries that made more than `permits`.
pub(super) fn crowding(beliefs: &[Belief], permits: u64) -> (u64, u64) {
    let mut events: Vec<(u64, i8)> = beliefs
        .iter()
        .flat_map(|b| [(b.start, 1), (b.end, -1)])
        .collect();
    // Ends before entries at one instant.
    events.sort_unstable();
    let (mut inside, mut most, mut over) = (0_i64, 0_i64, 0);
    for (_, step) in events {
        inside += i64::from(step);
        most = most.max(inside);
        if step > 0 && inside > i64::try_from(permits).unwrap_or(i64::MAX) {
            over += 1;
        }
    }
    (u64::try_from(most).unwrap_or(0), over)
}

/// Pairs of beliefs, one of them a writer's, that overlap.
pub(super) fn writer_overlaps(beliefs: &[Belief]) -> u64 {
    let mut count = 0;
    for (i, a) in beliefs.iter().enumerate() {
        for b in &beliefs[i + 1..] {
            if (a.write || b.write) && a.start < b.end && b.start < a.end {
                count += 1;
            }
        }
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger(lines: &[(usize, &str)]) -> Ledger {
        Ledger {
            lines: lines.iter().map(|(i, l)| (*i, (*l).to_owned())).collect(),
            ..Ledger::default()
        }
    }

    #[test]
    fn a_fourth_believer_is_counted_and_a_deadline_or_kill_ends_a_belief() {
        // w0's belief ends at its deadline (20), w1's at its kill (25): w4 entering at 30
        // makes 3; w5 at 32 makes 4.
        let seen = ledger(&[
            (0, "enter permit 1 10 20"),
            (1, "enter permit 2 11 99"),
            (1, "killed 25"),
            (2, "enter permit 3 12 99"),
            (3, "enter permit 4 13 99"),
            (4, "enter permit 5 30 99"),
            (5, "enter permit 6 32 99"),
            (0, "exit 90 20"),
        ]);
        let found = beliefs(&seen, 100);
        assert_eq!(crowding(&found, 3), (4, 2), "{found:?}");
        assert_eq!(crowding(&found[..4], 3), (4, 1));
    }

    #[test]
    fn readers_share_but_a_writer_overlapping_anyone_is_counted() {
        let seen = ledger(&[
            (0, "enter read 0 10 50"),
            (1, "enter read 0 12 50"),
            (0, "exit 20 50"),
            (1, "exit 21 50"),
            (2, "enter write 1 30 40"),
            (3, "enter read 0 35 90"),
        ]);
        let found = beliefs(&seen, 100);
        assert_eq!(writer_overlaps(&found), 1, "{found:?}");
        assert_eq!(writer_overlaps(&found[..2]), 0);
    }
}
