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

    /// One queue-aware acquire: with `wake_channel` set, a waiter that finds the key held is
    /// queued for hand-off (see `handoff`). With `wait_for_replicas`, a win is followed by
    /// `WAIT`.
    ///
    /// # Errors
    /// [`LockError::Redis`], or [`LockError::NotReplicated`] after a win that too few replicas
    /// acknowledged (the caller releases the key).
    pub(crate) async fn acquire(
        &self,
        key: &str,
        counter_key: &str,
        token: &str,
        ttl: Duration,
        wake_channel: Option<&str>,
    ) -> Result<Vote, LockError> {
        let (queue, entries) = handoff::queue_keys(&self.key_prefix, key);
        let vote = scripts::ACQUIRE_QUEUED
            .key(key)
            .key(counter_key)
            .key(queue)
            .key(entries)
            .arg(token)
            .arg(duration_ms(ttl))
            .arg(u8::from(wake_channel.is_some()))
            .arg(duration_ms(handoff::ENTRY_LEASE))
            .arg(wake_channel.unwrap_or_default())
            .invoke_async::<(i64, i64)>(&mut self.node.clone())
            .await
            .map_err(|e| scripts::explain(&scripts::ACQUIRE_QUEUED, e))
            .and_then(|reply| Vote::from_reply(reply, counter_key != key))?;
        if let (Vote::Won { .. }, Some(replicas)) = (&vote, &self.replicas) {
            replicas.wait(&self.node, key).await?;
        }
        Ok(vote)
    }

    /// Compare-and-delete with hand-off to the first live waiter; also withdraws `token` from
    /// the waiter queue.
    pub(crate) async fn release(&self, key: &str, token: &str) -> redis::RedisResult<Released> {
        let (queue, entries) = handoff::queue_keys(&self.key_prefix, key);
        scripts::RELEASE_HANDOFF
            .key(key)
            .key(queue)
            .key(entries)
            .arg(token)
            .arg(duration_ms(handoff::CLAIM_WINDOW))
            .invoke_async::<i64>(&mut self.node.clone())
            .await
            .map_err(|e| scripts::explain(&scripts::RELEASE_HANDOFF, e))
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
