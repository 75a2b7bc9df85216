//! [`Vote`] and [`Released`]: the outcomes of an acquire round and of a release, on one node
//! or a Redlock quorum.

use std::time::Duration;

/// The outcome of one acquire round.
#[derive(Debug)]
pub(crate) enum Vote {
    /// The key was set (on a quorum, for Redlock); the fencing token the round minted.
    Won { fencing_token: u64 },
    /// Not won; the smallest remaining TTL a holder reported, if any.
    Lost { holder_ttl: Option<Duration> },
}

impl Vote {
    /// The vote for one node's acquire-script reply `(1, fencing_token)` or `(0, pttl_ms)`.
    /// A pttl of 0 (free, but a queued waiter has the turn) or -1 (no expiry) reports no TTL.
    ///
    /// # Errors
    /// A won reply whose fencing token is not positive: the counter was overwritten (only
    /// `INCR` from 0 up is ours), so the token would not fence anything. The caller releases
    /// the key as after any failed acquire.
    /// Without fencing (`fenced` false, `FencingCounter::Off`) a win carries token 0.
    pub(crate) fn from_reply((won, value): (i64, i64), fenced: bool) -> redis::RedisResult<Vote> {
        if won == 1 {
            match u64::try_from(value) {
                Ok(fencing_token) if fencing_token > 0 || !fenced => {
                    Ok(Vote::Won { fencing_token })
                }
                _ => Err(redis::RedisError::from((
                    redis::ErrorKind::Client,
                    "the fencing counter holds a value lockcore did not mint",
                    format!(
                        "INCR returned {value}; expected a positive count (delete the counter key only if no resource has stored a fence yet)"
                    ),
                ))),
            }
        } else {
            Ok(Vote::Lost {
                holder_ttl: u64::try_from(value)
                    .ok()
                    .filter(|ms| *ms > 0)
                    .map(Duration::from_millis),
            })
        }
    }
}

/// The outcome of a compare-and-delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Released {
    /// The key held the token and was deleted (Redlock: on a quorum).
    Deleted,
    /// The key was missing: it expired, was deleted, or (a re-sent command) this release ran
    /// already.
    Missing,
    /// The key holds another holder's token or another type; it was left alone. Redlock: the
    /// token was on fewer than a quorum of nodes.
    HeldByOther,
    /// Redlock: deleted on `confirmed` nodes, fewer than the quorum of `needed`, and enough
    /// nodes did not answer within the node timeout that the token may have been on a quorum.
    Unconfirmed { confirmed: usize, needed: usize },
}
