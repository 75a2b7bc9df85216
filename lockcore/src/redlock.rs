//! The nodes a manager locks on: one Redis node, or Redlock over N independent masters.
//!
//! # Redlock
//! The algorithm of the Redlock spec (redis.io, "Distributed Locks with Redis"):
//! 1. send the acquire script (`SET key token NX PX ttl`) to all N masters in parallel, each
//!    bounded by a per-node timeout that is small next to the TTL (default ttl/10, at most the
//!    response timeout);
//! 2. the attempt is won when a quorum of N/2 + 1 of the *configured* N answered "acquired"
//!    (a node that errors or times out is a vote against; it never shrinks N); it ends as soon
//!    as the quorum is won or can no longer be won, without waiting for the slowest node;
//! 3. validity = ttl − elapsed − (ttl·0.01 + 2 ms), measured on a monotonic clock from the
//!    start of the attempt, saturating at zero; a win with no validity left counts as failed;
//! 4. a failed attempt releases its token on all N nodes, including those that errored or have
//!    not answered yet: the release follows the `SET` on the same connection, so a node that
//!    answers late does not keep a loser's token.
//!
//! Release goes to all nodes. Extend and watchdog renewal succeed only with a quorum (and, for
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
//! The guard's fencing token is the maximum of the counters returned by the winning quorum.
//! Any two quorums share a node, so a later acquisition sees a larger value *as long as no node
//! loses its counter*. That is exactly what Redlock cannot promise (Kleppmann, 2016): a node
//! that restarts without persistence restarts its counter, and the tokens may then go back.
//! Treat Redlock fencing tokens as best effort unless every node runs with
//! `appendfsync always`.

use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use redis::aio::ConnectionManager;

use crate::options::duration_ms;
use crate::{LockError, handoff, scripts};

/// The nodes of one manager.
#[derive(Clone)]
pub(crate) struct Nodes {
    conns: Vec<ConnectionManager>,
    /// Bound on each node's reply in Redlock mode; `None`: the connection's response timeout.
    node_timeout: Option<Duration>,
    /// The manager's key prefix, under which the waiter queue keys live.
    key_prefix: String,
}

/// The outcome of one acquire round.
#[derive(Debug)]
pub(crate) enum Vote {
    /// A quorum set the key; the largest fencing token they returned.
    Won { fencing_token: u64 },
    /// Not won; the smallest remaining TTL a holder reported, if any.
    Lost { holder_ttl: Option<Duration> },
}

impl Nodes {
    pub(crate) fn new(
        conns: Vec<ConnectionManager>,
        node_timeout: Option<Duration>,
        key_prefix: String,
    ) -> Self {
        Nodes {
            conns,
            node_timeout,
            key_prefix,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.conns.len()
    }

    /// The hand-off queue keys of `key` on a single node; `None` under Redlock, which has no
    /// queue.
    fn queue_keys(&self, key: &str) -> Option<(String, String)> {
        (!self.is_redlock()).then(|| handoff::queue_keys(&self.key_prefix, key))
    }

    /// N/2 + 1 of the configured N.
    pub(crate) fn quorum(&self) -> usize {
        self.conns.len() / 2 + 1
    }

    fn is_redlock(&self) -> bool {
        self.conns.len() > 1
    }

    /// The per-node bound for a lease of `ttl`: the configured node timeout, or ttl/10.
    pub(crate) fn node_timeout(&self, ttl: Duration) -> Option<Duration> {
        self.is_redlock().then(|| {
            self.node_timeout
                .unwrap_or(ttl / 10)
                .max(Duration::from_millis(1))
        })
    }

    /// Runs `call` on every node in parallel, each bounded by the node timeout, and feeds the
    /// replies to `tally` as they come; `tally` returns `true` when the outcome is decided.
    /// A timed-out node reports `None`.
    async fn fan_out<T, F, Fut>(
        &self,
        ttl: Duration,
        call: F,
        mut tally: impl FnMut(Option<redis::RedisResult<T>>) -> bool,
    ) where
        F: Fn(ConnectionManager) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        let timeout = self.node_timeout(ttl);
        if let ([conn], None) = (self.conns.as_slice(), timeout) {
            // One node: no fan-out to schedule.
            tally(Some(call(conn.clone()).await));
            return;
        }
        let mut replies: FuturesUnordered<_> = self
            .conns
            .iter()
            .map(|conn| {
                let reply = call(conn.clone());
                async move {
                    match timeout {
                        Some(limit) => tokio::time::timeout(limit, reply).await.ok(),
                        None => Some(reply.await),
                    }
                }
            })
            .collect();
        while let Some(reply) = replies.next().await {
            if tally(reply) {
                return;
            }
        }
    }

    /// One acquire round on all nodes.
    ///
    /// # Errors
    /// One node: [`LockError::Redis`] on any failure. Redlock: [`LockError::QuorumUnreachable`]
    /// when so many nodes failed that no quorum could be won.
    ///
    /// On a single node the queue-aware script runs: with `wake_channel` set, a waiter that
    /// finds the key held is queued for hand-off (see `handoff`).
    pub(crate) async fn acquire(
        &self,
        key: &str,
        counter_key: &str,
        token: &str,
        ttl: Duration,
        wake_channel: Option<&str>,
    ) -> Result<Vote, LockError> {
        let n = self.len();
        let quorum = self.quorum();
        let (mut won, mut held, mut failed) = (0usize, 0usize, 0usize);
        let mut fencing_token = 0u64;
        let mut holder_ttl: Option<Duration> = None;
        let mut last_error = None;
        let ttl_ms = duration_ms(ttl);
        let queue = self.queue_keys(key);
        let queue = queue.as_ref();
        self.fan_out(
            ttl,
            |mut conn| async move {
                match queue {
                    Some((queue, entries)) => {
                        scripts::ACQUIRE_QUEUED
                            .key(key)
                            .key(counter_key)
                            .key(queue)
                            .key(entries)
                            .arg(token)
                            .arg(ttl_ms)
                            .arg(u8::from(wake_channel.is_some()))
                            .arg(duration_ms(handoff::ENTRY_LEASE))
                            .arg(wake_channel.unwrap_or_default())
                            .invoke_async::<(i64, i64)>(&mut conn)
                            .await
                    }
                    None => {
                        scripts::ACQUIRE
                            .key(key)
                            .key(counter_key)
                            .arg(token)
                            .arg(ttl_ms)
                            .invoke_async::<(i64, i64)>(&mut conn)
                            .await
                    }
                }
            },
            |reply| {
                match reply {
                    Some(Ok((1, fence))) => {
                        won += 1;
                        fencing_token = fencing_token.max(u64::try_from(fence).unwrap_or(0));
                    }
                    Some(Ok((_, pttl))) => {
                        held += 1;
                        // 0: free, but a queued waiter has the turn (no lease to wait out);
                        // -1: the key has no expiry.
                        if let Some(ms) = u64::try_from(pttl).ok().filter(|ms| *ms > 0) {
                            let ttl = Duration::from_millis(ms);
                            holder_ttl = Some(holder_ttl.map_or(ttl, |t| t.min(ttl)));
                        }
                    }
                    Some(Err(err)) => {
                        failed += 1;
                        last_error = Some(err);
                    }
                    None => failed += 1,
                }
                won >= quorum || won + (n - won - held - failed) < quorum
            },
        )
        .await;
        if won >= quorum {
            return Ok(Vote::Won { fencing_token });
        }
        if !self.is_redlock()
            && let Some(err) = last_error
        {
            return Err(LockError::Redis(err));
        }
        if failed > n - quorum {
            return Err(LockError::QuorumUnreachable {
                reachable: won + held,
                needed: quorum,
            });
        }
        Ok(Vote::Lost { holder_ttl })
    }

    /// Compare-and-delete of `token` on every node (one node: with hand-off to the first live
    /// waiter, which also withdraws `token` from the waiter queue). `Ok(true)` when it was deleted on a quorum
    /// (one node: on that node).
    ///
    /// # Errors
    /// One node: [`LockError::Redis`]. Redlock: [`LockError::QuorumUnreachable`] when fewer
    /// than a quorum of nodes answered.
    pub(crate) async fn release(
        &self,
        key: &str,
        token: &str,
        ttl: Duration,
    ) -> Result<bool, LockError> {
        let (mut deleted, mut answered) = (0usize, 0usize);
        let mut last_error = None;
        let queue = self.queue_keys(key);
        let queue = queue.as_ref();
        self.fan_out(
            ttl,
            |mut conn| async move {
                match queue {
                    Some((queue, entries)) => {
                        scripts::RELEASE_HANDOFF
                            .key(key)
                            .key(queue)
                            .key(entries)
                            .arg(token)
                            .arg(duration_ms(handoff::CLAIM_WINDOW))
                            .invoke_async::<i64>(&mut conn)
                            .await
                    }
                    None => {
                        scripts::RELEASE
                            .key(key)
                            .arg(token)
                            .invoke_async::<i64>(&mut conn)
                            .await
                    }
                }
            },
            |reply| {
                match reply {
                    Some(Ok(n)) => {
                        answered += 1;
                        deleted += usize::from(n == 1);
                    }
                    Some(Err(err)) => last_error = Some(err),
                    None => {}
                }
                false
            },
        )
        .await;
        self.settle(answered, last_error)?;
        Ok(deleted >= self.quorum())
    }

    /// Compare-and-`PEXPIRE` of every `(key, token, ttl)` on every node, in one script call
    /// per node. Entry `i` of the result is `true` when lease `i` was renewed on a quorum.
    ///
    /// # Errors
    /// As [`release`](Self::release).
    pub(crate) async fn renew(
        &self,
        leases: &[(&str, &str, Duration)],
    ) -> Result<Vec<bool>, LockError> {
        let shortest = leases
            .iter()
            .map(|(_, _, ttl)| *ttl)
            .min()
            .unwrap_or(Duration::ZERO);
        let mut votes = vec![0usize; leases.len()];
        let mut answered = 0usize;
        let mut last_error = None;
        self.fan_out(
            shortest,
            |mut conn| async move {
                let mut invocation = scripts::RENEW.prepare_invoke();
                for (key, token, ttl) in leases {
                    invocation.key(*key).arg(*token).arg(duration_ms(*ttl));
                }
                invocation.invoke_async::<Vec<i64>>(&mut conn).await
            },
            |reply| {
                match reply {
                    Some(Ok(renewed)) => {
                        answered += 1;
                        for (vote, ok) in votes.iter_mut().zip(renewed) {
                            *vote += usize::from(ok == 1);
                        }
                    }
                    Some(Err(err)) => last_error = Some(err),
                    None => {}
                }
                false
            },
        )
        .await;
        self.settle(answered, last_error)?;
        let quorum = self.quorum();
        Ok(votes.into_iter().map(|v| v >= quorum).collect())
    }

    /// An error when fewer than a quorum of nodes answered.
    fn settle(
        &self,
        answered: usize,
        last_error: Option<redis::RedisError>,
    ) -> Result<(), LockError> {
        if answered >= self.quorum() {
            return Ok(());
        }
        match last_error {
            Some(err) if !self.is_redlock() => Err(LockError::Redis(err)),
            _ => Err(LockError::QuorumUnreachable {
                reachable: answered,
                needed: self.quorum(),
            }),
        }
    }
}

impl Nodes {
    /// One connection per node, for data that lives beside the locks (idempotency records).
    #[cfg(feature = "idempotency")]
    pub(crate) fn connections(&self) -> &[ConnectionManager] {
        &self.conns
    }
}
