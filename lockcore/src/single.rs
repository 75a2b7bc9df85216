//! [`Single`]: the lock protocol on one node (a plain server, a Sentinel-resolved primary or a
//! cluster), with the fair hand-off queue of `handoff`.

use std::sync::Arc;
use std::time::Duration;

use crate::LockError;
use crate::fencing::{self, FencingCounter};
use crate::handoff::{self, Handoff};
use crate::node::Node;
use crate::options::duration_ms;
use crate::renew::{RenewItem, renew_on};
use crate::replicas::WaitForReplicas;
use crate::scripts;
use crate::vote::{Released, Vote};

/// One key of an [`acquire_all`](Single::acquire_all) call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BulkKey<'a> {
    /// The full lock key.
    pub(crate) key: &'a str,
    /// Its fencing counter key (`fencing::counter_key`).
    pub(crate) counter_key: &'a str,
    /// The lock value to set: token and holder metadata.
    pub(crate) token: &'a str,
}

/// A reply of [`ACQUIRE_ALL`](scripts::ACQUIRE_ALL) that is not `{0}` nor `{1, tokens..}`.
fn unexpected_reply(reply: &[redis::Value]) -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::Client,
        "unexpected reply of the acquire-all script",
        format!("{reply:?}"),
    ))
}

/// A queued attempt's place in the hand-off protocol: the channel that wakes the waiter, the
/// attempt's sequence number within its acquire call (1 for the first, which queues up; later
/// ones re-check), and the claim window and entry lease the waiter asks for (see
/// [`handoff::windows`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct QueueTicket<'a> {
    pub(crate) channel: &'a str,
    pub(crate) seq: u64,
    pub(crate) claim: Duration,
    pub(crate) lease: Duration,
}

/// One node and its hand-off wiring.
#[derive(Clone)]
pub(crate) struct Single {
    node: Node,
    handoff: Arc<Handoff>,
    /// The manager's key prefix, under which the waiter queue keys live.
    key_prefix: String,
    /// Where the manager's fencing counter lives: a release mints a waiter's token with it.
    fencing_counter: FencingCounter,
    replicas: Option<WaitForReplicas>,
}

impl Single {
    pub(crate) fn new(
        node: Node,
        handoff: Arc<Handoff>,
        key_prefix: String,
        fencing_counter: FencingCounter,
        replicas: Option<WaitForReplicas>,
    ) -> Self {
        Single {
            node,
            handoff,
            key_prefix,
            fencing_counter,
            replicas,
        }
    }

    pub(crate) fn handoff(&self) -> &Arc<Handoff> {
        &self.handoff
    }

    /// Stops the hand-off listener and, under Sentinel, the fail-over subscription.
    pub(crate) fn close(&self) {
        self.handoff.close();
        if let Some(primary) = self.node.as_sentinel() {
            primary.close();
        }
    }

    /// One queue-aware acquire ([`ACQUIRE_QUEUED`](scripts::ACQUIRE_QUEUED)): with `queue`
    /// set, a waiter that finds the key held is queued for hand-off (see `handoff`). With
    /// `wait_for_replicas`, the script and `WAIT` go in one pipeline (see
    /// [`WaitForReplicas::invoke`]), and a win counts once enough replicas acknowledged it.
    ///
    /// # Errors
    /// [`LockError::Redis`], or [`LockError::NotReplicated`] after a win that too few replicas
    /// acknowledged (the caller releases the key).
    pub(crate) async fn acquire(
        &self,
        key: &str,
        counter_key: &str,
        value: &str,
        ttl: Duration,
        queue: Option<QueueTicket<'_>>,
    ) -> Result<Vote, LockError> {
        let (queue_key, entries_key) = handoff::queue_keys(&self.key_prefix, key);
        let ticket = match queue {
            None => "0 0 0 0 ".to_owned(),
            Some(ticket) => format!(
                "{} {} {} {} {}",
                if ticket.seq <= 1 { 1 } else { 2 },
                ticket.seq,
                duration_ms(ticket.claim),
                duration_ms(ticket.lease),
                ticket.channel
            ),
        };
        let bytes = key.len()
            + counter_key.len()
            + queue_key.len()
            + entries_key.len()
            + value.len()
            + ticket.len();
        let mut call = scripts::Call::new(&scripts::ACQUIRE_QUEUED, 4, 7, bytes);
        call.arg(key)
            .arg(counter_key)
            .arg(&queue_key)
            .arg(&entries_key)
            .arg(value)
            .arg(duration_ms(ttl))
            .arg(&ticket);
        let fenced = counter_key != key;
        let Some(replicas) = &self.replicas else {
            let reply = call.invoke::<redis::Value>(&mut self.node.clone()).await?;
            return Vote::from_reply(reply, fenced, key);
        };
        let (reply, acked) = replicas.invoke(&self.node, &call, key).await?;
        let vote = Vote::from_reply(reply, fenced, key)?;
        if let Vote::Won { .. } = vote {
            replicas.check(key, acked)?;
        }
        Ok(vote)
    }

    /// Whether a waiter may start on a hand-over's grant without a round trip. Not with
    /// `wait_for_replicas`: `WAIT` covers only the writes of the connection that sends it, and
    /// the grant was written by the releaser's, so the waiter re-checks instead (its own
    /// `PEXPIRE` of the key, then `WAIT`).
    pub(crate) fn starts_on_grant(&self) -> bool {
        self.replicas.is_none()
    }

    /// Whether [`acquire_all`](Self::acquire_all) can take `keys` in one script call: always on
    /// a plain or Sentinel node; on a cluster only when every lock key, fencing counter and
    /// waiter queue sits in one slot (a script's keys must share a slot).
    pub(crate) fn takes_together(&self, keys: &[BulkKey<'_>]) -> bool {
        if !self.node.is_cluster() {
            return true;
        }
        let mut slots = keys.iter().flat_map(|bulk| {
            let queue = handoff::queue_key(&self.key_prefix, bulk.key);
            [bulk.key, bulk.counter_key, &queue]
                .map(|key| crate::slot::key_hash_slot(key.as_bytes()))
        });
        let first = slots.next();
        slots.all(|slot| Some(slot) == first)
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
            .map(|bulk| handoff::queue_key(&self.key_prefix, bulk.key))
            .collect();
        let bytes = keys
            .iter()
            .zip(&queues)
            .map(|(bulk, queue)| {
                bulk.key.len() + bulk.counter_key.len() + queue.len() + bulk.token.len()
            })
            .sum::<usize>();
        let mut call = scripts::Call::new(
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
            call.arg(bulk.token);
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
    /// the key withdraws from the waiter queue instead.
    pub(crate) async fn release(&self, key: &str, value: &str) -> redis::RedisResult<Released> {
        let (queue, entries) = handoff::queue_keys(&self.key_prefix, key);
        let counter = fencing::counter_key(&self.key_prefix, key, self.fencing_counter);
        let bytes = key.len() + counter.len() + queue.len() + entries.len() + value.len();
        scripts::Call::new(&scripts::RELEASE_HANDOFF, 4, 5, bytes)
            .arg(key)
            .arg(&counter)
            .arg(&queue)
            .arg(&entries)
            .arg(value)
            .invoke::<i64>(&mut self.node.clone())
            .await
            .map(|reply| match reply {
                1 => Released::Deleted,
                0 => Released::Missing,
                _ => Released::HeldByOther,
            })
    }

    /// Whether the connection may send a command twice (the cluster client re-sends after a
    /// dropped connection or a timeout), so that a release can find its own key gone.
    pub(crate) fn may_resend(&self) -> bool {
        self.node.is_cluster()
    }

    /// `items` split into the groups one renewal call each may take: on a cluster one group per
    /// slot (a script's keys must share a slot), so that each shard's leases are renewed on
    /// their own; on a plain or Sentinel node one group. Every item lands in exactly one group.
    pub(crate) fn renewal_groups<T>(
        &self,
        items: Vec<T>,
        key_of: impl Fn(&T) -> &str,
    ) -> Vec<Vec<T>> {
        if self.node.is_cluster() {
            crate::slot::group_by_slot(items, key_of)
        } else {
            vec![items]
        }
    }

    /// Compare-and-`PEXPIRE` of every `(key, token, ttl)` of one
    /// [`renewal_groups`](Self::renewal_groups) group, in one script call; see
    /// [`renew_on`] for the entries.
    ///
    /// # Errors
    /// [`LockError::Redis`] when the call fails.
    pub(crate) async fn renew(&self, leases: &[RenewItem<'_>]) -> Result<Vec<bool>, LockError> {
        debug_assert!(
            !self.node.is_cluster()
                || crate::slot::group_by_slot(leases.to_vec(), |l| l.0).len() <= 1,
            "a renewal call on a cluster spans slots"
        );
        Ok(renew_on(&mut self.node.clone(), leases).await?)
    }

    /// [`renew`](Self::renew) of one lease by an extend; with `wait_for_replicas`, the renewal
    /// script and `WAIT` go in one pipeline.
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
        let mut call = scripts::Call::new(&scripts::RENEW, 1, 3, key.len() + token.len());
        call.arg(key).arg(token).arg(duration_ms(ttl));
        let (renewed, acked): (Vec<i64>, usize) = replicas.invoke(&self.node, &call, key).await?;
        let extended = renewed.first() == Some(&1);
        if extended {
            replicas.check(key, acked)?;
        }
        Ok(extended)
    }
}

impl Single {
    /// The node, for data that lives beside the locks (idempotency records).
    #[cfg(feature = "idempotency")]
    pub(crate) fn node(&self) -> &Node {
        &self.node
    }
}
