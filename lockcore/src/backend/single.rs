//! [`Single`]: the lock protocol on one node (a plain server, a Sentinel-resolved primary or a
//! cluster), with the fair hand-off queue of `handoff`.

use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::time::Instant;

use crate::backend::Hold;
use crate::backend::handoff::Handoff;
use crate::backend::migration::wait_out;
use crate::backend::renew::{RenewItem, renew_on};
use crate::backend::replicas::WaitForReplicas;
use crate::backend::vote::{Released, Vote, check_kind};
use crate::error::LockError;
use crate::options::LockOptions;
use crate::protocol::call::{Call, preload_on};
use crate::protocol::fencing::FencingCounter;
use crate::protocol::keyspace;
use crate::protocol::messages::QueueTicket;
use crate::protocol::scripts;
use crate::protocol::value::{LockValue, Share, share_of};
use crate::transport::node::Node;
use crate::util::time::duration_ms;

/// One key of an [`acquire_all`](Single::acquire_all) call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BulkKey<'a> {
    /// The full lock key.
    pub(crate) key: &'a str,
    /// Its fencing counter key (`keyspace::counter_key`).
    pub(crate) counter_key: &'a str,
    /// The lock value to set: token and holder metadata.
    pub(crate) value: &'a LockValue,
}

/// A reply of [`ACQUIRE_ALL`](scripts::ACQUIRE_ALL) that is not `{0}` nor `{1, tokens..}`.
fn unexpected_reply(reply: &[redis::Value]) -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::Client,
        "unexpected reply of the acquire-all script",
        format!("{reply:?}"),
    ))
}

/// How an acquire call on one node waits, decided from its options.
pub(crate) enum SinglePlan<'a> {
    /// Queue fairly and be handed the lock: the wake-ups of `handoff`, and whether a grant's
    /// wake-up alone starts the holder (not with `wait_for_replicas`: `WAIT` covers only the
    /// writes of the connection that sends it, and the grant was the releaser's, so the waiter
    /// re-checks instead).
    Queue {
        handoff: &'a Arc<Handoff>,
        starts_on_grant: bool,
    },
    /// Retry with backoff (`handoff(false)`, or no wait at all).
    Backoff,
}

/// One node and its hand-off wiring.
#[derive(Clone)]
pub(crate) struct Single {
    pub(super) node: Node,
    handoff: Arc<Handoff>,
    /// The manager's key prefix, under which the waiter queue keys live.
    pub(super) key_prefix: String,
    /// Where the manager's fencing counter lives: a release mints a waiter's token with it.
    pub(super) fencing_counter: FencingCounter,
    pub(super) replicas: Option<WaitForReplicas>,
    /// How long a call Redis Cluster refuses during a slot migration is sent again (see
    /// `migration`).
    pub(super) response_timeout: Duration,
}

impl Single {
    /// The backend of `node`: the scripts loaded into its cache (so that the first burst of
    /// acquires does not each meet `NOSCRIPT`), an eviction policy that can drop the fencing
    /// counter warned about, the wake-up channel subscribed (so that the first contended waiter
    /// is already woken by a push), and one round trip timed (it sizes the first waiter's claim
    /// window and entry lease).
    pub(crate) async fn open(
        node: Node,
        key_prefix: String,
        fencing_counter: FencingCounter,
        replicas: Option<WaitForReplicas>,
        response_timeout: Duration,
        runtime: &Handle,
    ) -> Self {
        let handoff = Arc::new(Handoff::new(
            node.subscriber(),
            keyspace::wake_channel(&key_prefix),
            runtime.clone(),
            response_timeout,
        ));
        let started = Instant::now();
        match preload_on(&mut node.clone()).await {
            Ok(()) => handoff.record_round_trip(started.elapsed()),
            // They load on first use instead (`NOSCRIPT`).
            Err(err) => tracing::debug!(error = %err, "could not preload the lock scripts"),
        }
        warn_if_counter_can_be_evicted(&mut node.clone()).await;
        handoff.subscribe().await;
        Single {
            node,
            handoff,
            key_prefix,
            fencing_counter,
            replicas,
            response_timeout,
        }
    }

    /// How a call with `opts` waits on this node.
    pub(crate) fn plan(&self, opts: &LockOptions) -> SinglePlan<'_> {
        if opts.handoff_enabled() && !opts.wait_budget().is_zero() {
            SinglePlan::Queue {
                handoff: &self.handoff,
                starts_on_grant: self.replicas.is_none(),
            }
        } else {
            SinglePlan::Backoff
        }
    }

    /// Stops the hand-off listener and the node's own background work.
    pub(crate) fn close(&self) {
        self.handoff.close();
        self.node.close();
    }

    /// One queue-aware acquire ([`ACQUIRE_QUEUED`](scripts::ACQUIRE_QUEUED)): with `queue`
    /// set, a waiter that finds the key held is queued for hand-off (see `handoff`). With
    /// `wait_for_replicas`, the script and `WAIT` go in one pipeline (see
    /// [`WaitForReplicas::invoke`]), and a win counts once enough replicas acknowledged it.
    /// With `stamp`, the stored value's `acquired_at` is the server's time (for a minimum hold).
    ///
    /// # Errors
    /// [`LockError::Redis`], or [`LockError::NotReplicated`] after a win that too few replicas
    /// acknowledged (the caller releases the key).
    pub(crate) async fn acquire(
        &self,
        key: &str,
        counter_key: &str,
        value: &LockValue,
        ttl: Duration,
        queue: Option<&QueueTicket<'_>>,
        stamp: bool,
    ) -> Result<Vote, LockError> {
        if let Some(share) = value.share() {
            return self
                .acquire_share(key, counter_key, value, ttl, queue, share)
                .await;
        }
        let (queue_key, entries_key) = keyspace::waiter_queue_keys(&self.key_prefix, key);
        let ticket = QueueTicket::encode(queue);
        // A re-check may find the key free and serve the waiters ahead, some of which may wait
        // for shares: it names the share set. A first attempt takes a free key at once.
        let shares_key = queue
            .filter(|ticket| ticket.seq > 1)
            .map(|_| keyspace::shares_key(&self.key_prefix, key));
        let bytes = key.len()
            + counter_key.len()
            + queue_key.len()
            + entries_key.len()
            + shares_key.as_ref().map_or(0, String::len)
            + value.as_str().len()
            + ticket.len();
        let call = |shares_key: Option<&String>| {
            let keys = 4 + usize::from(shares_key.is_some());
            let mut call = Call::new(&scripts::ACQUIRE_QUEUED, keys, keys + 4, bytes);
            call.arg(key)
                .arg(counter_key)
                .arg(&queue_key)
                .arg(&entries_key);
            if let Some(shares_key) = shares_key {
                call.arg(shares_key);
            }
            call.arg(value).arg(duration_ms(ttl)).arg(&ticket);
            if stamp {
                call.arg("1");
            }
            call
        };
        let fenced = counter_key != key;
        match self
            .send_acquire(call(shares_key.as_ref()), fenced, key, None)
            .await
        {
            // A slot migration refuses the missing share set of a plain lock: the re-check
            // without it still refreshes the waiter's entry (see `migration`).
            Err(err) if shares_key.is_some() && err.script_never_ran() => {
                self.send_acquire(call(None), fenced, key, None).await
            }
            vote => vote,
        }
    }

    /// Sends an acquire script `call` on `key` (with `WAIT`, when the manager waits for
    /// replicas) and reads its vote.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    pub(super) async fn send_acquire(
        &self,
        call: Call<'_>,
        fenced: bool,
        key: &str,
        share: Option<Share>,
    ) -> Result<Vote, LockError> {
        let Some(replicas) = &self.replicas else {
            let reply = call.invoke::<redis::Value>(&mut self.node.clone()).await?;
            check_kind(&reply, key, share)?;
            return Vote::from_reply(reply, fenced, key);
        };
        let (reply, acked) = replicas.invoke(&self.node, &call, key).await?;
        check_kind(&reply, key, share)?;
        let vote = Vote::from_reply(reply, fenced, key)?;
        if let Vote::Won { .. } = vote {
            replicas.check(key, acked)?;
        }
        Ok(vote)
    }

    /// Whether [`acquire_all`](Self::acquire_all) can take `keys` in one script call: every
    /// lock key, fencing counter and waiter queue must be where one call can touch them (one
    /// slot, on a cluster).
    pub(crate) fn takes_together(&self, keys: &[BulkKey<'_>]) -> bool {
        let queues: Vec<String> = keys
            .iter()
            .map(|bulk| keyspace::queue_key(&self.key_prefix, bulk.key))
            .collect();
        let names = keys
            .iter()
            .zip(&queues)
            .flat_map(|(bulk, queue)| [bulk.key, bulk.counter_key, queue.as_str()]);
        self.node.one_call(names)
    }

    /// Every key of `keys` in one [`ACQUIRE_ALL`](scripts::ACQUIRE_ALL) call, all or nothing.
    /// `Ok(Some(fencing tokens))` in key order when all were taken (with `wait_for_replicas`,
    /// sent in one pipeline with `WAIT`, which covers every write of the call), `Ok(None)` when
    /// a key is held or has queued waiters (nothing was written).
    ///
    /// # Errors
    /// [`LockError::Redis`] (also for a reply that is not the script's, or a fencing token that
    /// is not positive), or [`LockError::NotReplicated`]: some keys may then be set, and the
    /// caller releases every token.
    pub(crate) async fn acquire_all(
        &self,
        keys: &[BulkKey<'_>],
        ttl: Duration,
    ) -> Result<Option<Vec<u64>>, LockError> {
        let queues: Vec<String> = keys
            .iter()
            .map(|bulk| keyspace::queue_key(&self.key_prefix, bulk.key))
            .collect();
        let bytes = keys
            .iter()
            .zip(&queues)
            .map(|(bulk, queue)| {
                bulk.key.len() + bulk.counter_key.len() + queue.len() + bulk.value.as_str().len()
            })
            .sum::<usize>();
        let mut call = Call::new(
            &scripts::ACQUIRE_ALL,
            3 * keys.len(),
            4 * keys.len() + 1,
            bytes,
        );
        for (bulk, queue) in keys.iter().zip(&queues) {
            call.arg(bulk.key).arg(bulk.counter_key).arg(queue);
        }
        call.arg(duration_ms(ttl));
        for bulk in keys {
            call.arg(bulk.value);
        }
        let first_key = keys.first().map_or("", |bulk| bulk.key);
        let (reply, acked): (Vec<redis::Value>, Option<usize>) = match &self.replicas {
            None => (call.invoke(&mut self.node.clone()).await?, None),
            Some(replicas) => {
                let (reply, acked) = replicas.invoke(&self.node, &call, first_key).await?;
                (reply, Some(acked))
            }
        };
        let tokens = match reply.split_first() {
            Some((redis::Value::Int(0), [])) => return Ok(None),
            Some((redis::Value::Int(1), tokens)) if tokens.len() == keys.len() => tokens
                .iter()
                .zip(keys)
                .map(|(token, bulk)| {
                    let won = redis::Value::Array(vec![redis::Value::Int(1), token.clone()]);
                    match Vote::from_reply(won, bulk.counter_key != bulk.key, bulk.key)? {
                        Vote::Won { fencing_token, .. } => Ok(fencing_token),
                        Vote::Lost { .. } => Err(unexpected_reply(&reply).into()),
                    }
                })
                .collect::<Result<Vec<u64>, LockError>>()?,
            _ => return Err(unexpected_reply(&reply).into()),
        };
        if let (Some(replicas), Some(acked)) = (&self.replicas, acked) {
            replicas.check(first_key, acked)?;
        }
        Ok(Some(tokens))
    }

    /// Compare-and-delete with hand-off to the first live waiter; a value that does not hold
    /// the key withdraws from the waiter queue instead. A key found missing before `deadline`
    /// counts as deleted on a cluster: its client may have re-sent this release after a lost
    /// reply, and the first run deleted it. With `hold`, a key whose minimum hold (counted from
    /// its `acquired_at`, by the server's clock) is not over is kept for what is left of it
    /// (at most the lease's TTL, also when the key still lives a hand-over's claim window), and
    /// no waiter is handed it (`protocol/lua/hold.lua`). During a slot migration a refused call
    /// is narrowed or sent again, for at most the response timeout and never past `deadline`
    /// (see `migration`).
    ///
    /// # Errors
    /// [`LockError::Redis`] when the call fails (or is still refused by the cluster).
    pub(crate) async fn release(
        &self,
        key: &str,
        value: &LockValue,
        deadline: Option<Instant>,
        hold: Option<Hold>,
    ) -> Result<Released, LockError> {
        let until = self.refusals_until(deadline);
        let reply = wait_out(until, || async {
            let full = self.release_call(key, value, hold, true);
            match full.invoke::<i64>(&mut self.node.clone()).await {
                Err(err) => match LockError::from(err) {
                    refused if refused.script_never_ran() => {
                        self.release_narrower(key, value, hold, refused).await
                    }
                    err => Err(err),
                },
                Ok(reply) => Ok(reply),
            }
        })
        .await?;
        let resent = self.node.resends_commands() && deadline.is_some_and(|d| Instant::now() < d);
        Ok(match reply {
            1 => Released::Deleted,
            0 if resent => Released::Deleted,
            0 => Released::Missing,
            _ => Released::HeldByOther,
        })
    }

    /// Whether the connection may send a command twice, so that a script can find its own
    /// earlier run's work.
    pub(crate) fn resends_commands(&self) -> bool {
        self.node.resends_commands()
    }

    /// `items` split into the groups one renewal call each may take: one per slot on a
    /// cluster (a script's keys must share a slot), so that each shard's leases are renewed on
    /// their own; one group otherwise. Every item lands in exactly one group.
    pub(crate) fn renewal_groups<T>(
        &self,
        items: Vec<T>,
        key_of: impl Fn(&T) -> &str,
    ) -> Vec<Vec<T>> {
        self.node.calls(items, key_of)
    }

    /// Compare-and-`PEXPIRE` of every `(key, token, ttl)` of one
    /// [`renewal_groups`](Self::renewal_groups) group, in one script call; see
    /// [`renew_on`] for the entries. During a slot migration a refused call is sent again for at most the response timeout
    /// (see `migration`).
    ///
    /// # Errors
    /// [`LockError::Redis`] when the call fails.
    pub(crate) async fn renew(&self, leases: &[RenewItem<'_>]) -> Result<Vec<bool>, LockError> {
        wait_out(self.refusals_until(None), || async {
            if !leases.iter().any(|(_, arg, _)| share_of(arg).is_some()) {
                return Ok(renew_on(&mut self.node.clone(), leases).await?);
            }
            self.renew_mixed(leases).await
        })
        .await
    }

    /// [`renew`](Self::renew) of one lease by an extend; with `wait_for_replicas`, the renewal
    /// script and `WAIT` go in one pipeline (sent again, as a renewal, while a slot migration
    /// refuses it).
    ///
    /// # Errors
    /// [`LockError::Redis`], or [`LockError::NotReplicated`] after an extend that too few
    /// replicas acknowledged.
    pub(crate) async fn extend(
        &self,
        key: &str,
        token: &str,
        ttl: Duration,
    ) -> Result<bool, LockError> {
        let Some(replicas) = &self.replicas else {
            return Ok(self.renew(&[(key, token, ttl)]).await?.first() == Some(&true));
        };
        let shares = share_of(token).map(|_| keyspace::shares_key(&self.key_prefix, key));
        let mut call = match &shares {
            None => Call::new(&scripts::RENEW, 1, 3, key.len() + token.len()),
            Some(shares) => {
                let mut call = Call::new(&scripts::RENEW_SHARE, 2, 4, key.len() * 2 + token.len());
                call.arg(key).arg(shares);
                call
            }
        };
        if shares.is_none() {
            call.arg(key);
        }
        call.arg(token).arg(duration_ms(ttl));
        let (renewed, acked): (Vec<i64>, usize) = wait_out(self.refusals_until(None), || {
            replicas.invoke(&self.node, &call, key)
        })
        .await?;
        let extended = renewed.first() == Some(&1);
        if extended {
            replicas.check(key, acked)?;
        }
        Ok(extended)
    }
}

impl Single {
    /// The node, for data that lives beside the locks (idempotency records).
    pub(crate) fn node(&self) -> &Node {
        &self.node
    }
}

/// Logs a warning, once per process, when the node's `maxmemory-policy` may evict the fencing
/// counter (the `allkeys-*` policies). `CONFIG` may be disabled on managed Redis; then nothing is
/// checked.
async fn warn_if_counter_can_be_evicted(conn: &mut Node) {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if WARNED.load(std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    let reply: redis::RedisResult<Vec<String>> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query_async(conn)
        .await;
    if let Ok(reply) = reply
        && let Some(policy) = reply.get(1)
        && policy.starts_with("allkeys-")
        && !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed)
    {
        tracing::warn!(
            policy,
            "maxmemory-policy may evict the fencing counter; fencing tokens are then no longer monotonic"
        );
    }
}
