//! [`Redlock`]: the lock protocol over N independent masters.
//!
//! The algorithm of the Redlock spec (redis.io, "Distributed Locks with Redis"):
//! 1. send the acquire script (`SET key token NX PX ttl`) to all N masters in parallel, each
//!    bounded by a per-node timeout that is small next to the TTL (default ttl/10, at most the
//!    response timeout);
//! 2. the attempt is won when a quorum of N/2 + 1 of the *configured* N answered "acquired"
//!    (a node that errors or times out is a vote against; it never shrinks N); it ends as soon
//!    as the quorum is won or can no longer be won, without waiting for the slowest node. A
//!    won round's requests to the other nodes are still sent and finished in the background,
//!    each within the node timeout (a request not yet on the wire, such as one waiting for
//!    its connection or re-sent after `NOSCRIPT`, would be skipped once its caller is gone),
//!    so the lock lives on every live node, not on a bare quorum that one restart without
//!    persistence would break; the watchdog renews it on every node that holds it, and a
//!    release that overtakes a late request is followed by a clean-up on that node
//!    (`late`);
//! 3. validity = ttl − elapsed − (ttl·0.01 + 2 ms), measured on a monotonic clock from the
//!    start of the attempt, saturating at zero; a win with less than one node timeout of
//!    validity left counts as failed;
//! 4. a failed attempt releases its token on all N nodes, including those that errored or have
//!    not answered yet: the release follows the `SET` on the same connection, so a node that
//!    answers late does not keep a loser's token.
//!
//! Release goes to all nodes; it is confirmed by a quorum of deletions, reported lost only when
//! the token was on fewer than a quorum, and otherwise (nodes late beyond the node timeout
//! decide) unconfirmed and finished in the background. Extend and watchdog renewal succeed only with a quorum (and, for
//! extend, within the remaining validity).
//!
//! ## What Redlock assumes
//! - Clock drift between the nodes and the client is bounded (the drift allowance above).
//! - A node that restarts keeps its data (AOF with `appendfsync always`) or stays down for at
//!   least the longest TTL; otherwise it can forget a held lock and grant it again, and two
//!   holders overlap.
//! - N = 2 has a quorum of 2: losing either node stops all locking, so it tolerates no fault.
//!   Use N = 3 or 5. When one primary is an acceptable point of failure, a single node is
//!   simpler, faster (one round trip) and gives the same guarantees in practice.
//!
//! ## Fencing tokens under Redlock
//! The guard's fencing token is the maximum minted by the winning quorum, and a quorum of
//! counters is raised to it before the guard is returned (`Nodes::raise_counters` has the
//! argument). A node that restarts without persistence restarts its counter, and the tokens may
//! then go back (Kleppmann, 2016): fencing under Redlock needs `appendfsync always` on every
//! node.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::join_all;
use futures_util::stream::FuturesUnordered;
use tokio::runtime::Handle;
use tokio::time::Instant;

use crate::backend::late::LateRounds;
use crate::backend::renew::{RenewItem, renew_on};
use crate::backend::vote::{Released, Vote};
use crate::error::LockError;
use crate::protocol::call::Call;
use crate::protocol::scripts;
use crate::transport::node::Node;
use crate::util::time::duration_ms;

/// N independent masters.
#[derive(Clone)]
pub(crate) struct Redlock {
    nodes: Vec<Node>,
    /// Bound on each node's reply; `None`: ttl/10 of the lease at hand.
    node_timeout: Option<Duration>,
    /// Where a won round's late requests finish when the caller has no runtime (see `spawn`).
    runtime: Handle,
    /// The won rounds whose late requests still run, and whether their lock was released.
    late: Arc<LateRounds>,
}

/// One node's reply in a round: its index, and `None` when it timed out.
type Reply<'a, T> =
    Pin<Box<dyn Future<Output = (usize, Option<redis::RedisResult<T>>)> + Send + 'a>>;

impl Redlock {
    pub(crate) fn new(nodes: Vec<Node>, node_timeout: Option<Duration>, runtime: Handle) -> Self {
        Redlock {
            nodes,
            node_timeout,
            runtime,
            late: Arc::default(),
        }
    }

    /// N/2 + 1 of the configured N.
    pub(crate) fn quorum(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    /// The per-node bound for a lease of `ttl`: the configured node timeout, or ttl/10; at
    /// least 1 ms.
    pub(crate) fn node_timeout(&self, ttl: Duration) -> Duration {
        self.node_timeout
            .unwrap_or(ttl / 10)
            .max(Duration::from_millis(1))
    }

    /// Runs `call` on the nodes `to` selects, in parallel, each bounded by the node timeout,
    /// and feeds the replies to `tally` with the node's index as they come; `tally` returns
    /// `true` when the outcome is decided. A timed-out node reports `None`. Returns the replies
    /// not awaited yet (dropping them drops their requests; see [`finish`](Self::finish)).
    async fn fan_out<'a, T, F, Fut>(
        &self,
        ttl: Duration,
        to: impl Fn(usize) -> bool,
        call: F,
        mut tally: impl FnMut(usize, Option<redis::RedisResult<T>>) -> bool,
    ) -> FuturesUnordered<Reply<'a, T>>
    where
        F: Fn(Node) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>> + Send + 'a,
        T: 'a,
    {
        let limit = self.node_timeout(ttl);
        let mut replies: FuturesUnordered<Reply<'a, T>> = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(index, _)| to(*index))
            .map(|(index, node)| {
                let reply = call(node.clone());
                Box::pin(async move { (index, tokio::time::timeout(limit, reply).await.ok()) })
                    as Reply<'a, T>
            })
            .collect();
        while let Some((index, reply)) = replies.next().await {
            if tally(index, reply) {
                break;
            }
        }
        replies
    }

    /// Finishes `late`, the requests of a round won with `token` on `key` that the round did
    /// not await, in the background: they are sent and run, each within the node timeout it
    /// was given. A reply that comes after the lock's release (which may have overtaken the
    /// request on its node: see `late`) is followed by a compare-and-delete on that node.
    fn finish(
        &self,
        key: &str,
        token: &str,
        ttl: Duration,
        mut late: FuturesUnordered<Reply<'static, redis::Value>>,
    ) {
        if late.is_empty() {
            return;
        }
        self.late.started(token);
        let redlock = self.clone();
        let (key, token) = (key.to_owned(), token.to_owned());
        let limit = self.node_timeout(ttl);
        crate::util::spawn::background(&self.runtime, async move {
            while let Some((index, _)) = late.next().await {
                if let Some(hold) = redlock.late.released(&token) {
                    let until = Instant::now() + limit;
                    redlock
                        .release_on(&key, &token, &[index], until, hold)
                        .await;
                }
            }
            redlock.late.ended(&token);
        });
    }

    /// One acquire round on all nodes; with `stamp`, each node stamps the value's `acquired_at`
    /// with its own clock (for a minimum hold).
    ///
    /// # Errors
    /// [`LockError::QuorumUnreachable`] when so many nodes failed that no quorum could be won,
    /// or the counters could not be raised on a quorum.
    pub(crate) async fn acquire(
        &self,
        key: &str,
        counter_key: &str,
        token: &str,
        ttl: Duration,
        stamp: bool,
    ) -> Result<Vote, LockError> {
        let n = self.nodes.len();
        let quorum = self.quorum();
        let (mut won, mut held, mut failed) = (0usize, 0usize, 0usize);
        // The fencing token each winning node minted.
        let mut minted: Vec<Option<u64>> = vec![None; n];
        let mut holder_ttl: Option<Duration> = None;
        // A node whose key holds another type: the key is not a lock (reported after the round).
        let mut not_a_lock: Option<LockError> = None;
        let ttl_ms = duration_ms(ttl);
        // `FencingCounter::Off`: the counter key is the lock key, and nothing is minted.
        let fenced = counter_key != key;
        let mut call = Call::new(
            &scripts::ACQUIRE,
            2,
            5,
            key.len() + counter_key.len() + token.len(),
        );
        call.arg(key).arg(counter_key).arg(token).arg(ttl_ms);
        if stamp {
            // Each node stamps its own clock: the minimum hold is measured per node.
            call.arg("1");
        }
        // Owned by each node's request, which may outlive this round (see `finish`).
        let call = Arc::new(call);
        let late = self
            .fan_out(
                ttl,
                |_| true,
                |mut node| {
                    let call = Arc::clone(&call);
                    async move { call.invoke::<redis::Value>(&mut node).await }
                },
                |index, reply| {
                    let vote = reply.map(|reply| {
                        reply
                            .map_err(LockError::from)
                            .and_then(|r| Vote::from_reply(r, fenced, key))
                    });
                    match vote {
                        Some(Ok(Vote::Won { fencing_token, .. })) => {
                            won += 1;
                            minted[index] = Some(fencing_token);
                        }
                        Some(Ok(Vote::Lost { holder_ttl: ttl })) => {
                            held += 1;
                            if let Some(ttl) = ttl {
                                holder_ttl = Some(holder_ttl.map_or(ttl, |t| t.min(ttl)));
                            }
                        }
                        Some(Err(err @ LockError::NotALock { .. })) => {
                            failed += 1;
                            not_a_lock = Some(err);
                        }
                        Some(Err(_)) | None => failed += 1,
                    }
                    won >= quorum || won + (n - won - held - failed) < quorum
                },
            )
            .await;
        if let Some(err) = not_a_lock {
            return Err(err);
        }
        if won >= quorum {
            // The other nodes take the lock too: it lives on every live node, not on a bare
            // quorum. A lost round drops them instead: the caller's clean-up follows on each
            // node's connection, and a request still unsent is then never sent.
            self.finish(key, token, ttl, late);
            let fencing_token = minted.iter().flatten().copied().max().unwrap_or(0);
            if fenced {
                self.raise_counters(counter_key, fencing_token, &minted, ttl)
                    .await?;
            }
            return Ok(Vote::Won {
                fencing_token,
                stored: None,
            });
        }
        if failed > n - quorum {
            return Err(LockError::QuorumUnreachable {
                reachable: won + held,
                needed: quorum,
            });
        }
        Ok(Vote::Lost { holder_ttl })
    }

    /// Redlock: makes sure a quorum of the nodes this attempt won has its counter at least
    /// `fencing_token` before the guard is returned, so that the next acquisition's token is
    /// larger whichever quorum it wins.
    ///
    /// Why: each node's counter is incremented only where an attempt won `SET NX`, so the
    /// counters drift apart (attempts that lose the quorum move some of them), and the maximum
    /// over one quorum can be below the maximum over another. Let `S` be the raised winners: a
    /// quorum of nodes that hold this attempt's key and whose counter is at least `t`. A later
    /// acquisition wins a quorum too, so it shares a node `s` with `S`, and its `SET NX` on `s`
    /// succeeded only once this key was gone there: after its release or expiry, both of which
    /// come after the raise on `s` (the raise is acknowledged while the key is held, before the
    /// guard is returned and within the validity). Its `INCR` on `s`, in the same script as that
    /// `SET NX`, therefore returns more than `t`. Only winners are raised: a node that does not
    /// hold the key could take another attempt's `SET NX` before the raise arrives.
    ///
    /// Winners whose own minted token is `fencing_token` already qualify; when they form a
    /// quorum (the counters agree, as in steady operation) nothing is sent. Otherwise the other
    /// winners get a `max(counter, fencing_token)` write, one round trip.
    ///
    /// # Errors
    /// [`LockError::QuorumUnreachable`] when fewer than a quorum of winners could be raised.
    async fn raise_counters(
        &self,
        counter_key: &str,
        fencing_token: u64,
        minted: &[Option<u64>],
        ttl: Duration,
    ) -> Result<(), LockError> {
        let quorum = self.quorum();
        let mut raised = minted
            .iter()
            .filter(|fence| **fence == Some(fencing_token))
            .count();
        if raised >= quorum {
            return Ok(());
        }
        // A raise still unsent once a quorum is raised is not needed: dropped.
        drop(
            self.fan_out(
                ttl,
                |index| minted[index].is_some_and(|fence| fence != fencing_token),
                |mut node| async move {
                    Call::new(&scripts::RAISE_COUNTER, 1, 2, counter_key.len())
                        .arg(counter_key)
                        .arg(fencing_token)
                        .invoke::<i64>(&mut node)
                        .await
                },
                |_, reply| {
                    raised += usize::from(matches!(reply, Some(Ok(_))));
                    raised >= quorum
                },
            )
            .await,
        );
        if raised >= quorum {
            Ok(())
        } else {
            Err(LockError::QuorumUnreachable {
                reachable: raised,
                needed: quorum,
            })
        }
    }

    /// Compare-and-delete of `token` on every node, each answer awaited for one node timeout
    /// (with `hold`, a node keeps the key for what is left of that minimum after the acquire by
    /// its own clock, and counts it deleted: `protocol/lua/hold.lua`):
    /// - [`Released::Deleted`] when it was deleted on a quorum;
    /// - [`Released::HeldByOther`] when the token was on fewer than a quorum: the nodes that
    ///   deleted it and those that did not answer are fewer than a quorum;
    /// - [`Released::Unconfirmed`] otherwise: the nodes that did not answer in time decide,
    ///   and their answers are not awaited (the release was sent to them).
    ///
    /// # Errors
    /// [`LockError::QuorumUnreachable`] when the nodes that answered or timed out are fewer
    /// than a quorum (the others failed at once: down or refusing connections).
    pub(crate) async fn release(
        &self,
        key: &str,
        token: &str,
        ttl: Duration,
        hold: Option<Duration>,
    ) -> Result<Released, LockError> {
        self.late.release(token, hold);
        let (mut deleted, mut answered, mut late) = (0usize, 0usize, 0usize);
        // Every reply is awaited (the tally never decides early): nothing is left over.
        let _ = self
            .fan_out(
                ttl,
                |_| true,
                |mut node| async move {
                    let mut call = Call::new(&scripts::RELEASE, 1, 3, key.len() + token.len());
                    call.arg(key).arg(token);
                    if let Some(hold) = hold {
                        call.arg(duration_ms(hold));
                    }
                    call.invoke::<i64>(&mut node).await
                },
                |_, reply| {
                    match reply {
                        Some(Ok(n)) => {
                            answered += 1;
                            deleted += usize::from(n == 1);
                        }
                        Some(Err(_)) => {}
                        None => late += 1,
                    }
                    false
                },
            )
            .await;
        let quorum = self.quorum();
        let unknown = self.nodes.len() - answered;
        if deleted >= quorum {
            return Ok(Released::Deleted);
        }
        if deleted + unknown < quorum {
            return Ok(Released::HeldByOther);
        }
        if answered + late < quorum {
            return Err(LockError::QuorumUnreachable {
                reachable: answered,
                needed: quorum,
            });
        }
        Ok(Released::Unconfirmed {
            confirmed: deleted,
            needed: quorum,
        })
    }

    /// Background: compare-and-delete of `token` (kept for `hold`, as in
    /// [`release`](Self::release)) on the nodes `pending` (indexes), each answer
    /// awaited until `until` (not the node timeout: nobody waits on this). Returns the nodes
    /// that still did not answer.
    pub(crate) async fn release_on(
        &self,
        key: &str,
        token: &str,
        pending: &[usize],
        until: Instant,
        hold: Option<Duration>,
    ) -> Vec<usize> {
        self.late.release(token, hold);
        let calls = pending.iter().filter_map(|&index| {
            let mut node = self.nodes.get(index)?.clone();
            Some(async move {
                let mut call = Call::new(&scripts::RELEASE, 1, 3, key.len() + token.len());
                call.arg(key).arg(token);
                if let Some(hold) = hold {
                    call.arg(duration_ms(hold));
                }
                let reply = tokio::time::timeout_at(until, call.invoke::<i64>(&mut node)).await;
                (index, matches!(reply, Ok(Ok(_))))
            })
        });
        join_all(calls)
            .await
            .into_iter()
            .filter(|(_, answered)| !answered)
            .map(|(index, _)| index)
            .collect()
    }

    /// The number of configured nodes.
    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Compare-and-`PEXPIRE` of every `(key, token, ttl)` on every node, in one script call
    /// per node. Entry `i` of the result is `true` when lease `i` was renewed on a quorum.
    ///
    /// # Errors
    /// As [`release`](Self::release).
    pub(crate) async fn renew(&self, leases: &[RenewItem<'_>]) -> Result<Vec<bool>, LockError> {
        let shortest = leases
            .iter()
            .map(|(_, _, ttl)| *ttl)
            .min()
            .unwrap_or(Duration::ZERO);
        let mut votes = vec![0usize; leases.len()];
        let mut answered = 0usize;
        // Every node is awaited, also one that did not answer the acquire in time but holds
        // the lock now; nothing is left over.
        let _ = self
            .fan_out(
                shortest,
                |_| true,
                |mut node| async move { renew_on(&mut node, leases).await },
                |_, reply| {
                    if let Some(Ok(renewed)) = reply {
                        answered += 1;
                        for (vote, ok) in votes.iter_mut().zip(renewed) {
                            *vote += usize::from(ok);
                        }
                    }
                    false
                },
            )
            .await;
        self.settle(answered)?;
        let quorum = self.quorum();
        Ok(votes.into_iter().map(|v| v >= quorum).collect())
    }

    /// An error when fewer than a quorum of nodes answered.
    fn settle(&self, answered: usize) -> Result<(), LockError> {
        if answered >= self.quorum() {
            Ok(())
        } else {
            Err(LockError::QuorumUnreachable {
                reachable: answered,
                needed: self.quorum(),
            })
        }
    }
}

impl Redlock {
    /// The nodes, for data that lives beside the locks (idempotency records).
    pub(crate) fn nodes(&self) -> &[Node] {
        &self.nodes
    }
}
