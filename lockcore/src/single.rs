//! [`Single`]: the lock protocol on one node (a plain server, a Sentinel-resolved primary or a
//! cluster), with the fair hand-off queue of `handoff`.

use std::sync::Arc;
use std::time::Duration;

use crate::LockError;
use crate::handoff::{self, Handoff};
use crate::node::Node;
use crate::options::duration_ms;
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
fn unexpected_reply(reply: &[i64]) -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::Client,
        "unexpected reply of the acquire-all script",
        format!("{reply:?}"),
    ))
}

/// A queued attempt's place in the hand-off protocol: the channel that wakes the waiter, and
/// the attempt's sequence number within its acquire call (1 for the first, which queues up;
/// later ones re-check).
#[derive(Debug, Clone, Copy)]
pub(crate) struct QueueTicket<'a> {
    pub(crate) channel: &'a str,
    pub(crate) seq: u64,
}

/// One node and its hand-off wiring.
#[derive(Clone)]
pub(crate) struct Single {
    node: Node,
    handoff: Arc<Handoff>,
    /// The manager's key prefix, under which the waiter queue keys live.
    key_prefix: String,
    replicas: Option<WaitForReplicas>,
}

impl Single {
    pub(crate) fn new(
        node: Node,
        handoff: Arc<Handoff>,
        key_prefix: String,
        replicas: Option<WaitForReplicas>,
    ) -> Self {
        Single {
            node,
            handoff,
            key_prefix,
            replicas,
        }
    }

    pub(crate) fn handoff(&self) -> &Arc<Handoff> {
        &self.handoff
    }

    /// One queue-aware acquire ([`ACQUIRE_QUEUED`](scripts::ACQUIRE_QUEUED)): with `queue`
    /// set, a waiter that finds the key held is queued for hand-off (see `handoff`). With
    /// `wait_for_replicas`, a win is followed by `WAIT`.
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
        let queue_key = handoff::queue_key(&self.key_prefix, key);
        let (mode, channel, seq) = match queue {
            None => (0, "", 0),
            Some(ticket) => (
                if ticket.seq <= 1 { 1 } else { 2 },
                ticket.channel,
                ticket.seq,
            ),
        };
        let ticket = format!("{mode} {seq} {} {channel}", self.key_prefix.len());
        let bytes = key.len() + counter_key.len() + queue_key.len() + value.len() + ticket.len();
        let mut call = scripts::Call::new(&scripts::ACQUIRE_QUEUED, 3, 6, bytes);
        call.arg(key)
            .arg(counter_key)
            .arg(&queue_key)
            .arg(value)
            .arg(duration_ms(ttl))
            .arg(&ticket);
        let vote = call
            .invoke::<(i64, i64)>(&mut self.node.clone())
            .await
            .and_then(|reply| Vote::from_reply(reply, counter_key != key))?;
        if let (Vote::Won { .. }, Some(replicas)) = (&vote, &self.replicas) {
            replicas.wait(&self.node, key).await?;
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
        if !matches!(self.node, Node::Cluster(_)) {
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
    /// `Ok(Some(fencing tokens))` in key order when all were taken (followed by one `WAIT` with
    /// `wait_for_replicas`: it covers every write of the call), `Ok(None)` when a key is held or
    /// has queued waiters (nothing was written).
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
            .sum();
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
        let reply: Vec<i64> = call.invoke(&mut self.node.clone()).await?;
        let tokens = match reply.split_first() {
            Some((0, [])) => return Ok(None),
            Some((1, tokens)) if tokens.len() == keys.len() => tokens
                .iter()
                .zip(keys)
                .map(|(&token, bulk)| {
                    match Vote::from_reply((1, token), bulk.counter_key != bulk.key)? {
                        Vote::Won { fencing_token } => Ok(fencing_token),
                        Vote::Lost { .. } => Err(unexpected_reply(&reply)),
                    }
                })
                .collect::<redis::RedisResult<Vec<u64>>>()?,
            _ => return Err(unexpected_reply(&reply).into()),
        };
        if let (Some(replicas), Some(first)) = (&self.replicas, keys.first()) {
            replicas.wait(&self.node, first.key).await?;
        }
        Ok(Some(tokens))
    }

    /// Compare-and-delete with hand-off to the first live waiter; a value that does not hold
    /// the key withdraws from the waiter queue instead.
    pub(crate) async fn release(&self, key: &str, value: &str) -> redis::RedisResult<Released> {
        let (queue, waiter_prefix) = handoff::queue_keys(&self.key_prefix, key);
        let bytes = key.len() + queue.len() + value.len() + waiter_prefix.len();
        scripts::Call::new(&scripts::RELEASE_HANDOFF, 2, 4, bytes)
            .arg(key)
            .arg(&queue)
            .arg(value)
            .arg(&waiter_prefix)
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
        matches!(self.node, Node::Cluster(_))
    }

    /// Compare-and-`PEXPIRE` of every `(key, token, ttl)` in one script call (one per slot on
    /// a cluster); see [`Node::renew`] for the entries.
    pub(crate) async fn renew(
        &self,
        leases: &[(&str, &str, Duration)],
    ) -> Result<Vec<Option<bool>>, LockError> {
        Ok(self.node.clone().renew(leases).await?)
    }

    /// [`renew`](Self::renew) of one lease by an extend, followed by `WAIT` with
    /// `wait_for_replicas`.
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
        let extended = self.renew(&[(key, token, ttl)]).await?.first() == Some(&Some(true));
        if let (true, Some(replicas)) = (extended, &self.replicas) {
            replicas.wait(&self.node, key).await?;
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
