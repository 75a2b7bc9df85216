//! [`Backend`]: the one place that knows whether a manager locks on a single node or on a
//! Redlock quorum. It owns the connections, the scripts' error mapping, the clean-up policy of
//! a failed attempt and the background releases; the manager, guards, waiters and the watchdog
//! only call it.

pub(crate) mod backoff;
mod cleanup;
pub(crate) use cleanup::InFlightCall;
pub(crate) mod handoff;
mod late;
mod migration;
pub(crate) mod read;
pub(crate) mod redlock;
pub(crate) mod renew;
pub(crate) mod replicas;
pub(crate) mod round_trip;
pub(crate) mod shares;
pub(crate) mod single;
pub(crate) mod topology;
pub(crate) mod vote;
pub(crate) mod waiting;

use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::time::Instant;

use crate::backend::redlock::Redlock;
use crate::backend::renew::RenewItem;
use crate::backend::single::{BulkKey, Single, SinglePlan};
use crate::backend::vote::{Released, Vote};
use crate::error::LockError;
use crate::options::LockOptions;
use crate::protocol::messages::QueueTicket;
use crate::protocol::value::LockValue;
use crate::util::defer::OnDrop;
use crate::util::escape::Escaped;
use crate::util::time::{Shown, validity};

/// Where the locks live, and the runtime that background work falls back to. Cheap to clone
/// (connections and the hand-off state are shared).
#[derive(Clone)]
pub(crate) struct Backend {
    kind: Kind,
    runtime: Handle,
    /// Set by [`close`](Self::close): no acquire is made any more, and waiting calls wake.
    closed: Arc<cleanup::Closed>,
    /// The background releases in flight, which the manager's close waits for.
    in_flight: Arc<cleanup::InFlight>,
    /// The acquire calls in flight, which the manager's close waits for (bounded).
    calls: Arc<cleanup::InFlight>,
}

#[derive(Clone)]
enum Kind {
    Single(Single),
    Redlock(Redlock),
}

/// The minimum hold a release keeps a job lock's key for (`LockOptions::hold_at_least`), and
/// the lease's TTL: the key may be kept that long even when it still lives a hand-over's
/// shorter claim window (`protocol/lua/hold.lua`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Hold {
    pub(crate) at_least: Duration,
    pub(crate) ttl: Duration,
}

impl Hold {
    /// The hold of a lease with the minimum `at_least` (if any) and the TTL `ttl`.
    pub(crate) fn of(at_least: Option<Duration>, ttl: Duration) -> Option<Hold> {
        at_least.map(|at_least| Hold { at_least, ttl })
    }
}

/// The request of one acquire attempt.
pub(crate) struct AttemptRequest<'a> {
    pub(crate) key: &'a str,
    pub(crate) counter_key: &'a str,
    pub(crate) value: &'a LockValue,
    pub(crate) ttl: Duration,
    /// Queue for hand-off (single node).
    pub(crate) queue: Option<QueueTicket<'a>>,
    /// The caller's wait budget ends here; clean-up never waits past it.
    pub(crate) give_up_at: Option<Instant>,
    /// Stamp the stored value's `acquired_at` with the server's clock (a minimum hold is
    /// measured from it).
    pub(crate) stamp: bool,
}

impl Backend {
    /// One node.
    pub(crate) fn single(single: Single, runtime: Handle) -> Self {
        Backend {
            kind: Kind::Single(single),
            runtime,
            closed: Arc::default(),
            in_flight: Arc::default(),
            calls: Arc::default(),
        }
    }

    /// Redlock over several nodes.
    pub(crate) fn redlock(redlock: Redlock, runtime: Handle) -> Self {
        Backend {
            kind: Kind::Redlock(redlock),
            runtime,
            closed: Arc::default(),
            in_flight: Arc::default(),
            calls: Arc::default(),
        }
    }

    /// How an acquire call with `opts` waits.
    pub(crate) fn plan(&self, opts: &LockOptions) -> Plan<'_> {
        match &self.kind {
            Kind::Single(single) => match single.plan(opts) {
                SinglePlan::Queue {
                    handoff,
                    starts_on_grant,
                } => Plan::Queue {
                    handoff,
                    starts_on_grant,
                },
                // On one node the waiter queue knows a waiter by its token, so one value
                // serves the whole call (a value that never queued is withdrawn harmlessly).
                SinglePlan::Backoff => Plan::Backoff {
                    value_per_call: true,
                },
            },
            // A fresh value per attempt, so that a late clean-up of a failed attempt can never
            // touch a later attempt's lock.
            Kind::Redlock(_) => Plan::Backoff {
                value_per_call: false,
            },
        }
    }

    /// [`LockError::Closed`] once [`close`](Self::close) was called.
    pub(crate) fn ensure_open(&self) -> Result<(), LockError> {
        if self.closed.is_set() {
            return Err(LockError::Closed);
        }
        Ok(())
    }

    /// Rejects options this backend cannot honour, before any network call.
    ///
    /// # Errors
    /// [`LockError::InvalidOptions`] under Redlock when the validity (ttl minus the drift
    /// allowance) does not exceed the node timeout; [`LockError::Closed`] once closed.
    pub(crate) fn check(&self, opts: &LockOptions) -> Result<(), LockError> {
        self.ensure_open()?;
        let ttl = opts.ttl();
        let Kind::Redlock(redlock) = &self.kind else {
            return Ok(());
        };
        let node_timeout = redlock.node_timeout(ttl);
        if validity(ttl) > node_timeout {
            return Ok(());
        }
        Err(LockError::InvalidOptions {
            reason: format!(
                "ttl is {}; Redlock needs the validity (ttl minus the drift allowance of 1 % + 2 ms, here {}) to exceed the node timeout ({})",
                Shown(ttl),
                Shown(validity(ttl)),
                Shown(node_timeout),
            ),
        })
    }

    /// Rejects shares (a semaphore's permits, a read-write lock's readers) on `key` where they
    /// cannot be kept safely: under Redlock. A share is a member of a sorted set scored by one
    /// server's clock, and a permit count is only sound when every holder is counted in one
    /// place; Redlock's quorum of independent masters would let two halves each count their
    /// own holders (N permits on each majority that overlaps), so lockcore refuses instead of
    /// handing out a weaker guarantee.
    ///
    /// # Errors
    /// [`LockError::InvalidOptions`] under Redlock; [`LockError::Closed`] once closed.
    pub(crate) fn check_shares(&self, key: &str, what: &str) -> Result<(), LockError> {
        self.ensure_open()?;
        match &self.kind {
            Kind::Single(_) => Ok(()),
            Kind::Redlock(_) => Err(no_shares_under_redlock(key, what)),
        }
    }

    /// Who holds `key` now: nobody, a plain lock, or how many shares of which kind.
    ///
    /// # Errors
    /// [`LockError::Redis`], [`LockError::NotALock`], and [`LockError::InvalidOptions`] under
    /// Redlock (see [`check_shares`](Self::check_shares)).
    pub(crate) async fn holders(&self, key: &str) -> Result<shares::Holders, LockError> {
        match &self.kind {
            Kind::Single(single) => single.holders(key).await,
            Kind::Redlock(_) => Err(no_shares_under_redlock(key, "counting shares")),
        }
    }

    /// One acquire attempt, started at `attempt_start`. Cancel-safe: dropped while a request
    /// is in flight, it spawns a compare-and-delete of the token (the `SET` may have landed).
    ///
    /// # Errors
    /// One node: [`LockError::Redis`] at any failure, or [`LockError::NotReplicated`], after a
    /// compare-and-delete of the token (retried in the background if that fails too). Redlock:
    /// [`LockError::QuorumUnreachable`], with the token released on all nodes in the
    /// background.
    pub(crate) async fn attempt(
        &self,
        request: &AttemptRequest<'_>,
        attempt_start: Instant,
    ) -> Result<Vote, LockError> {
        let AttemptRequest {
            key,
            counter_key,
            value,
            ttl,
            queue,
            give_up_at,
            stamp,
        } = *request;
        let in_flight = OnDrop::new(|| {
            tracing::debug!(key = %Escaped(key), "acquire dropped in flight; releasing its token");
            self.spawn_release(key.to_owned(), value.clone(), ttl);
        });
        match &self.kind {
            Kind::Single(single) => {
                let vote = single
                    .acquire(key, counter_key, value, ttl, queue.as_ref(), stamp)
                    .await;
                let vote = match vote {
                    Ok(vote) => Ok(vote),
                    // Nothing ran, and a queued waiter keeps its place: its value stays its
                    // identity in the queue, and its acquire call withdraws it when it ends.
                    Err(err) if queue.is_some() && err.script_never_ran() => Err(err),
                    Err(err) => {
                        // The SET may have been applied even though its reply was lost.
                        if let Err(cleanup) = single.release(key, value, None, None).await {
                            tracing::warn!(key = %Escaped(key), error = %cleanup, "could not clean up after a failed acquire; retrying in the background");
                            self.spawn_release(key.to_owned(), value.clone(), ttl);
                        }
                        Err(err)
                    }
                };
                in_flight.disarm();
                vote
            }
            Kind::Redlock(redlock) => {
                let vote = redlock
                    .acquire(key, counter_key, value.as_str(), ttl, stamp)
                    .await;
                let node_timeout = redlock.node_timeout(ttl);
                // A win counts only with at least one node timeout of validity left, the
                // margin that keeps fencing tokens increasing (`Redlock::raise_counters`).
                let expired = attempt_start.elapsed() + node_timeout >= validity(ttl);
                // `in_flight` stays armed through the clean-up below: an attempt dropped there
                // still releases its token.
                let outcome = match vote {
                    Ok(won @ Vote::Won { .. }) if !expired => Ok(won),
                    Ok(vote) => {
                        // Some nodes may hold this attempt's token: take it back from all of
                        // them. Wait at most one node timeout, and never past the wait budget;
                        // a node still silent then gets the release in the background (it runs
                        // after this attempt's `SET`: same connection).
                        let limit = give_up_at.map_or(node_timeout, |at| {
                            node_timeout.min(at.saturating_duration_since(Instant::now()))
                        });
                        let cleanup = redlock.release(key, value.as_str(), ttl, None);
                        if tokio::time::timeout(limit, cleanup).await.is_err() {
                            self.spawn_release(key.to_owned(), value.clone(), ttl);
                        }
                        Ok(match vote {
                            Vote::Lost { holder_ttl } => Vote::Lost { holder_ttl },
                            Vote::Won { .. } => Vote::Lost { holder_ttl: None },
                        })
                    }
                    Err(err) => {
                        // Some nodes may hold the token; clean up without waiting on the
                        // unreachable ones.
                        self.spawn_release(key.to_owned(), value.clone(), ttl);
                        Err(err)
                    }
                };
                in_flight.disarm();
                outcome
            }
        }
    }

    /// The fast path of `acquire_many`: every key of `keys` in one script call, all or
    /// nothing. `Ok(None)` when the fast path does not apply (Redlock, or a cluster where the
    /// keys sit in more than one slot) or some key is held or has queued waiters; the caller
    /// then acquires the keys one by one. Cancel-safe like [`attempt`](Self::attempt): dropped
    /// in flight, it spawns a compare-and-delete of every token.
    ///
    /// # Errors
    /// As [`attempt`](Self::attempt) on one node, after a compare-and-delete of every token.
    pub(crate) async fn attempt_all(
        &self,
        keys: &[BulkKey<'_>],
        ttl: Duration,
    ) -> Result<Option<Vec<u64>>, LockError> {
        let Kind::Single(single) = &self.kind else {
            return Ok(None);
        };
        if !single.takes_together(keys) {
            return Ok(None);
        }
        let in_flight = OnDrop::new(|| {
            tracing::debug!(
                keys = keys.len(),
                "acquire of several keys dropped in flight; releasing its tokens"
            );
            for bulk in keys {
                self.spawn_release(bulk.key.to_owned(), bulk.value.clone(), ttl);
            }
        });
        let taken = match single.acquire_all(keys, ttl).await {
            // A re-sent call (cluster) may find the keys its first run set: take them back.
            Ok(None) if single.resends_commands() => {
                self.release_all_tokens(single, keys, ttl).await;
                Ok(None)
            }
            Ok(taken) => Ok(taken),
            Err(err) => {
                // Some SETs may have been applied even though the reply was lost.
                self.release_all_tokens(single, keys, ttl).await;
                Err(err)
            }
        };
        in_flight.disarm();
        taken
    }

    /// Compare-and-delete of `value` (one node: with hand-off to the first live waiter, which
    /// also withdraws `value` from the waiter queue; a key found missing before `deadline` is
    /// counted deleted where a command may have been re-sent). Redlock reports
    /// [`Released::HeldByOther`] when the token was on fewer than a quorum, and
    /// [`Released::Unconfirmed`] when nodes that did not answer in time decide (see
    /// [`Redlock::release`]). With `hold` (a minimum hold), a key whose minimum is not over yet
    /// by the server's clock is kept until it is, and counts as deleted.
    ///
    /// # Errors
    /// One node: [`LockError::Redis`]. Redlock: [`LockError::QuorumUnreachable`] when fewer
    /// than a quorum of nodes answered.
    pub(crate) async fn release(
        &self,
        key: &str,
        value: &LockValue,
        ttl: Duration,
        deadline: Option<Instant>,
        hold: Option<Duration>,
    ) -> Result<Released, LockError> {
        match &self.kind {
            Kind::Single(single) => Ok(single
                .release(key, value, deadline, Hold::of(hold, ttl))
                .await?),
            Kind::Redlock(redlock) => redlock.release(key, value.as_str(), ttl, hold).await,
        }
    }

    /// `items` split into the groups that are renewed independently, one
    /// [`renew`](Self::renew) call each: one per cluster slot (see [`Single::renewal_groups`]),
    /// otherwise one. Under Redlock one group, which [`renew`](Self::renew) sends to every node
    /// in parallel, each bounded by the node timeout. Every item lands in exactly one group.
    pub(crate) fn renewal_groups<T>(
        &self,
        items: Vec<T>,
        key_of: impl Fn(&T) -> &str,
    ) -> Vec<Vec<T>> {
        match &self.kind {
            Kind::Single(single) => single.renewal_groups(items, key_of),
            Kind::Redlock(_) => vec![items],
        }
    }

    /// Compare-and-`PEXPIRE` of every `(key, token, ttl)` of one
    /// [`renewal_groups`](Self::renewal_groups) group, in one script call per node. Entry `i`
    /// is `true` when lease `i` was renewed (Redlock: on a quorum), `false` when its key is gone
    /// or not its own.
    ///
    /// # Errors
    /// As [`release`](Self::release).
    pub(crate) async fn renew(&self, leases: &[RenewItem<'_>]) -> Result<Vec<bool>, LockError> {
        match &self.kind {
            Kind::Single(single) => single.renew(leases).await,
            Kind::Redlock(redlock) => redlock.renew(leases).await,
        }
    }

    /// An extend of one lease: [`renew`](Self::renew), followed on one node by `WAIT` when
    /// the manager waits for replicas. `Ok(true)` when it was renewed.
    ///
    /// # Errors
    /// As [`renew`](Self::renew), and [`LockError::NotReplicated`].
    pub(crate) async fn extend(
        &self,
        key: &str,
        token: &str,
        ttl: Duration,
    ) -> Result<bool, LockError> {
        match &self.kind {
            Kind::Single(single) => single.extend(key, token, ttl).await,
            Kind::Redlock(redlock) => {
                Ok(redlock.renew(&[(key, token, ttl)]).await?.first() == Some(&true))
            }
        }
    }

    /// Spawns `task` by the crate's one policy (see `spawn`).
    pub(crate) fn spawn<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        crate::util::spawn::background(&self.runtime, task);
    }

    /// Stops the background work that outlives the guards (the manager is closed): the
    /// hand-off listener, and the Sentinel fail-over subscription; later acquires fail with
    /// [`LockError::Closed`].
    pub(crate) fn close(&self) {
        self.closed.set();
        if let Kind::Single(single) = &self.kind {
            single.close();
        }
    }
}

impl Backend {
    /// Every node, for data that lives beside the locks (idempotency records).
    #[cfg(feature = "idempotency")]
    pub(crate) fn nodes(&self) -> DataNodes {
        match &self.kind {
            Kind::Single(single) => DataNodes {
                nodes: vec![single.node().clone()],
                quorum: 1,
            },
            Kind::Redlock(redlock) => DataNodes {
                nodes: redlock.nodes().to_vec(),
                quorum: redlock.quorum(),
            },
        }
    }
}

/// The nodes that data beside the locks lives on, and how many of them make it stored: one of
/// one, or Redlock's quorum.
#[cfg(feature = "idempotency")]
pub(crate) struct DataNodes {
    pub(crate) nodes: Vec<crate::transport::node::Node>,
    pub(crate) quorum: usize,
}

/// The refusal of `what` (a semaphore, a read lock) on `key` under Redlock.
fn no_shares_under_redlock(key: &str, what: &str) -> LockError {
    LockError::InvalidOptions {
        reason: format!(
            "{what} on `{}` is not supported under Redlock: its shares are counted in one sorted set by one server's clock, which a quorum of independent masters cannot keep; expected a single node, Sentinel or Redis Cluster manager",
            Escaped(key)
        ),
    }
}

/// How an acquire call waits between its attempts (see `waiting`).
pub(crate) enum Plan<'a> {
    /// In the fair queue of one node, handed the lock by a release (one value per call).
    Queue {
        handoff: &'a Arc<crate::backend::handoff::Handoff>,
        /// Whether a grant's wake-up alone starts the holder.
        starts_on_grant: bool,
    },
    /// With backoff and full jitter; one value per call, or one per attempt.
    Backoff { value_per_call: bool },
}
