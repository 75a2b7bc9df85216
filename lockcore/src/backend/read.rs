//! [`Backend::read`]: the value a lock key holds now and its remaining TTL, read without
//! writing (for `LockManager::holder`); under Redlock, the value whose token a quorum holds.

use std::time::Duration;

use futures_util::future::join_all;

use crate::backend::{Backend, Kind};
use crate::error::LockError;
use crate::protocol::call::Call;
use crate::protocol::keyspace;
use crate::protocol::scripts;
use crate::transport::node::Node;

/// A lock key's value and its remaining TTL (`None`: no expiry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Held {
    pub(crate) value: String,
    pub(crate) expires_in: Option<Duration>,
}

impl Backend {
    /// The value at `key` (a full key) and its TTL, `None` when the key is free. Under Redlock
    /// the key counts as held only when a quorum of nodes holds one token (the metadata and
    /// the shortest TTL come from those nodes).
    ///
    /// # Errors
    /// [`LockError::NotALock`] when the key holds another type; [`LockError::Redis`] (one node)
    /// or [`LockError::QuorumUnreachable`] (Redlock, fewer than a quorum answered).
    pub(crate) async fn read(&self, key: &str) -> Result<Option<Held>, LockError> {
        match &self.kind {
            Kind::Single(single) => read_on(&mut single.node().clone(), key).await,
            Kind::Redlock(redlock) => {
                let reads = join_all(redlock.nodes().iter().map(|node| {
                    let mut node = node.clone();
                    async move { read_on(&mut node, key).await }
                }))
                .await;
                let quorum = redlock.quorum();
                let mut answered = 0;
                let mut held = Vec::new();
                for read in reads {
                    match read {
                        Ok(value) => {
                            answered += 1;
                            held.extend(value);
                        }
                        Err(err @ LockError::NotALock { .. }) => return Err(err),
                        Err(_) => {}
                    }
                }
                if answered < quorum {
                    return Err(LockError::QuorumUnreachable {
                        reachable: answered,
                        needed: quorum,
                    });
                }
                Ok(on_quorum(held, quorum))
            }
        }
    }
}

/// The held value whose token is on at least `quorum` of `held` (one entry per node), with the
/// shortest TTL among them.
fn on_quorum(held: Vec<Held>, quorum: usize) -> Option<Held> {
    let token = held
        .iter()
        .map(|h| keyspace::split_value(&h.value).0)
        .find(|token| {
            held.iter()
                .filter(|h| keyspace::split_value(&h.value).0 == *token)
                .count()
                >= quorum
        })?
        .to_owned();
    let mut same = held
        .into_iter()
        .filter(|h| keyspace::split_value(&h.value).0 == token);
    let first = same.next()?;
    Some(same.fold(first, |a, b| match (a.expires_in, b.expires_in) {
        (Some(x), Some(y)) if y < x => b,
        (None, Some(_)) => b,
        _ => a,
    }))
}

/// One node's read (`lua/read_key.lua`): `[type, value, pttl_ms, seconds, microseconds]`.
async fn read_on(node: &mut Node, key: &str) -> Result<Option<Held>, LockError> {
    let reply: Vec<redis::Value> = Call::new(&scripts::READ, 1, 1, key.len())
        .arg(key)
        .invoke(node)
        .await?;
    let unexpected = || {
        LockError::from(redis::RedisError::from((
            redis::ErrorKind::Client,
            "unexpected reply of the read-key script",
            format!("{reply:?}"),
        )))
    };
    let (Some(kind), Some(value), Some(pttl)) = (reply.first(), reply.get(1), reply.get(2)) else {
        return Err(unexpected());
    };
    let kind: String = redis::from_redis_value_ref(kind).map_err(|_| unexpected())?;
    match kind.as_str() {
        "none" => Ok(None),
        "string" => {
            let value: String = redis::from_redis_value_ref(value).map_err(|_| unexpected())?;
            let pttl: i64 = redis::from_redis_value_ref(pttl).map_err(|_| unexpected())?;
            Ok(Some(Held {
                value,
                expires_in: u64::try_from(pttl).ok().map(Duration::from_millis),
            }))
        }
        _ => Err(LockError::NotALock {
            key: key.to_owned(),
            found: kind,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(token: &str, ms: u64) -> Held {
        Held {
            value: format!("{token} {{}}"),
            expires_in: Some(Duration::from_millis(ms)),
        }
    }

    #[test]
    fn a_token_on_a_quorum_holds_with_its_shortest_ttl() {
        let found = on_quorum(vec![held("a", 900), held("b", 50), held("a", 700)], 2);
        assert_eq!(found, Some(held("a", 700)));
        assert_eq!(on_quorum(vec![held("a", 900), held("b", 50)], 2), None);
        assert_eq!(on_quorum(Vec::new(), 1), None);
    }
}
