//! The messages of the hand-off protocol that are not keys: a queued attempt's ticket (an
//! argument of the acquire script) and a hand-over's wake-up (a pub/sub payload).

use std::time::Duration;

use crate::util::time::duration_ms;

/// A queued attempt's place in the hand-off protocol: the channel that wakes the waiter, the
/// attempt's sequence number within its acquire call (1 for the first, which queues up; later
/// ones re-check), and the claim window and entry lease the waiter asks for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QueueTicket<'a> {
    pub(crate) channel: &'a str,
    pub(crate) seq: u64,
    pub(crate) claim: Duration,
    pub(crate) lease: Duration,
}

impl QueueTicket<'_> {
    /// The ticket argument of the acquire script: `<mode> <seq> <claim_ms> <lease_ms>
    /// <channel>`, mode 1 for the first attempt and 2 for a re-check; `"0 0 0 0 "` (mode 0:
    /// one attempt that never queues) without a ticket.
    pub(crate) fn encode(ticket: Option<&Self>) -> String {
        let Some(ticket) = ticket else {
            return "0 0 0 0 ".to_owned();
        };
        let mut out = String::with_capacity(48 + ticket.channel.len());
        out.push(if ticket.seq <= 1 { '1' } else { '2' });
        let mut digits = itoa::Buffer::new();
        for n in [
            ticket.seq,
            duration_ms(ticket.claim),
            duration_ms(ticket.lease),
        ] {
            out.push(' ');
            out.push_str(digits.format(n));
        }
        out.push(' ');
        out.push_str(ticket.channel);
        out
    }
}

/// A hand-over's wake-up: the fencing token the release minted for the waiter, the sequence
/// number of the waiter's attempt whose entry the release read, and the value the release
/// stored (its `acquired_at` stamped with the time of the grant). A wake-up without a value
/// (`<token> 0 0`) grants nothing: it asks the waiter to re-check at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Grant {
    pub(crate) fencing_token: u64,
    pub(crate) seq: u64,
    pub(crate) stored: Option<String>,
}

/// Parses a wake-up payload `<token> <fencing token> <seq>[ <stored value>]`.
pub(crate) fn parse_wake_up(payload: &str) -> Option<(&str, Grant)> {
    let mut parts = payload.splitn(4, ' ');
    let (token, fencing, seq) = (parts.next()?, parts.next()?, parts.next()?);
    Some((
        token,
        Grant {
            fencing_token: fencing.parse().ok()?,
            seq: seq.parse().ok()?,
            stored: parts.next().map(str::to_owned),
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tickets_carry_mode_seq_windows_and_channel() {
        let ticket = |seq| QueueTicket {
            channel: "lock:__wake__:ab c",
            seq,
            claim: Duration::from_millis(700),
            lease: Duration::from_millis(800),
        };
        assert_eq!(
            QueueTicket::encode(Some(&ticket(1))),
            "1 1 700 800 lock:__wake__:ab c"
        );
        assert_eq!(
            QueueTicket::encode(Some(&ticket(7))),
            "2 7 700 800 lock:__wake__:ab c"
        );
        assert_eq!(QueueTicket::encode(None), "0 0 0 0 ");
    }

    #[test]
    fn wake_up_payloads_parse_or_are_ignored() {
        let token = "0f8fad5b-d9cb-469f-a165-70867728950e";
        assert_eq!(
            parse_wake_up(&format!("{token} 42 3")),
            Some((
                token,
                Grant {
                    fencing_token: 42,
                    seq: 3,
                    stored: None,
                }
            ))
        );
        let value = format!("{token} {{\"pid\":1,\"acquired_at\":7}}");
        assert_eq!(
            parse_wake_up(&format!("{token} 9007199254740993 4 {value}")),
            Some((
                token,
                Grant {
                    fencing_token: 9_007_199_254_740_993,
                    seq: 4,
                    stored: Some(value.clone()),
                }
            ))
        );
        for bad in ["", token, "t 1", "t x 1", "t 1 y", "t -1 2"] {
            assert_eq!(parse_wake_up(bad), None, "{bad:?}");
        }
    }
}
