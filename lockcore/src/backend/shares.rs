//! Shares on one node: a semaphore's permits and a read-write lock's readers, each a lease of
//! its own in the lock key's share set (see [`keyspace::shares_key`]), queued and handed over
//! in the lock key's fair queue with the plain locks.

use std::time::Duration;

use redis::Value;

use crate::backend::single::Single;
use crate::backend::vote::Vote;
use crate::error::LockError;
use crate::protocol::call::Call;
use crate::protocol::keyspace;
use crate::protocol::messages::QueueTicket;
use crate::protocol::scripts;
use crate::protocol::value::{LockValue, Share, share_of};
use crate::util::time::duration_ms;

/// Who holds a lock key now, as [`Single::holders`] reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Holders {
    /// Nobody.
    Free,
    /// A plain lock (a writer).
    Exclusive,
    /// `count` live shares of `share`'s kind.
    Shares { share: Share, count: u64 },
    /// `count` live shares whose marker is gone (an operator's `DEL`, an eviction): lost, they
    /// admit no new share until they end.
    Orphaned { count: u64 },
}

impl Single {
    /// One acquire attempt of a share ([`ACQUIRE_SHARE`](scripts::ACQUIRE_SHARE)); `queue` as
    /// for a plain lock.
    ///
    /// # Errors
    /// As [`acquire`](Single::acquire), and [`LockError::InvalidOptions`] when the key holds
    /// shares of another kind.
    pub(crate) async fn acquire_share(
        &self,
        key: &str,
        counter_key: &str,
        value: &LockValue,
        ttl: Duration,
        queue: Option<&QueueTicket<'_>>,
        share: Share,
    ) -> Result<Vote, LockError> {
        let (queue_key, entries_key) = keyspace::waiter_queue_keys(&self.key_prefix, key);
        let shares_key = keyspace::shares_key(&self.key_prefix, key);
        let ticket = QueueTicket::encode(queue);
        let bytes = key.len()
            + counter_key.len()
            + queue_key.len()
            + entries_key.len()
            + shares_key.len()
            + value.as_str().len()
            + ticket.len();
        let mut call = Call::new(&scripts::ACQUIRE_SHARE, 5, 8, bytes);
        call.arg(key)
            .arg(counter_key)
            .arg(&queue_key)
            .arg(&entries_key)
            .arg(&shares_key)
            .arg(value)
            .arg(duration_ms(ttl))
            .arg(&ticket);
        self.send_acquire(call, counter_key != key, key, Some(share))
            .await
    }

    /// [`renew`](Single::renew) of a group where some leases are shares (their argument is a
    /// share's value): the plain ones in one [`RENEW`](scripts::RENEW) call, the shares in one
    /// [`RENEW_SHARE`](scripts::RENEW_SHARE) call; the entries in `leases`' order.
    ///
    /// # Errors
    /// [`LockError::Redis`] when a call fails or replies with another number of entries.
    pub(crate) async fn renew_mixed(
        &self,
        leases: &[crate::backend::renew::RenewItem<'_>],
    ) -> Result<Vec<bool>, LockError> {
        let (shared, plain): (Vec<usize>, Vec<usize>) =
            (0..leases.len()).partition(|&i| share_of(leases[i].1).is_some());
        let mut renewed = vec![false; leases.len()];
        if !plain.is_empty() {
            let items: Vec<_> = plain.iter().map(|&i| leases[i]).collect();
            let reply = crate::backend::renew::renew_on(&mut self.node.clone(), &items).await?;
            for (&i, ok) in plain.iter().zip(reply) {
                renewed[i] = ok;
            }
        }
        let sets: Vec<String> = shared
            .iter()
            .map(|&i| keyspace::shares_key(&self.key_prefix, leases[i].0))
            .collect();
        let bytes = shared
            .iter()
            .map(|&i| leases[i].0.len() * 2 + leases[i].1.len() + 40)
            .sum();
        let mut call = Call::new(
            &scripts::RENEW_SHARE,
            2 * shared.len(),
            4 * shared.len(),
            bytes,
        );
        for (&i, set) in shared.iter().zip(&sets) {
            call.arg(leases[i].0).arg(set);
        }
        for &i in &shared {
            call.arg(leases[i].1).arg(duration_ms(leases[i].2));
        }
        let reply: Vec<i64> = call.invoke(&mut self.node.clone()).await?;
        if reply.len() != shared.len() {
            return Err(redis::RedisError::from((
                redis::ErrorKind::Client,
                "unexpected reply of the share renewal script",
                format!("expected {} entries, got {reply:?}", shared.len()),
            ))
            .into());
        }
        for (&i, ok) in shared.iter().zip(reply) {
            renewed[i] = ok == 1;
        }
        Ok(renewed)
    }

    /// Who holds `key` now ([`SHARES_COUNT`](scripts::SHARES_COUNT)); writes nothing.
    ///
    /// # Errors
    /// [`LockError::Redis`], and [`LockError::NotALock`] when the key holds another type.
    pub(crate) async fn holders(&self, key: &str) -> Result<Holders, LockError> {
        let shares_key = keyspace::shares_key(&self.key_prefix, key);
        let reply: Value = Call::new(&scripts::SHARES_COUNT, 2, 2, key.len() * 2)
            .arg(key)
            .arg(&shares_key)
            .invoke(&mut self.node.clone())
            .await?;
        let unexpected = || -> LockError {
            redis::RedisError::from((
                redis::ErrorKind::Client,
                "unexpected reply of the share count script",
                format!("{reply:?}"),
            ))
            .into()
        };
        let Value::Array(items) = &reply else {
            return Err(unexpected());
        };
        match items.as_slice() {
            [Value::Int(0)] => Ok(Holders::Free),
            [Value::Int(1)] => Ok(Holders::Exclusive),
            [Value::Int(2), Value::Int(count), kind] => {
                let kind: String = redis::from_redis_value_ref(kind).map_err(|_| unexpected())?;
                let share = Share::from_kind(&kind).ok_or_else(unexpected)?;
                let count = u64::try_from(*count).map_err(|_| unexpected())?;
                Ok(Holders::Shares { share, count })
            }
            [Value::Int(3), Value::Int(count)] => Ok(Holders::Orphaned {
                count: u64::try_from(*count).map_err(|_| unexpected())?,
            }),
            [Value::Int(-1), found] => Err(LockError::NotALock {
                key: key.to_owned(),
                found: redis::from_redis_value_ref(found).map_err(|_| unexpected())?,
            }),
            _ => Err(unexpected()),
        }
    }
}
