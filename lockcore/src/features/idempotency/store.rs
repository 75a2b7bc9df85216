//! The idempotency records in Redis: their JSON, the read (one node, or a Redlock quorum) and
//! the write, which a script makes conditional on the lock still holding the caller's value.

use std::time::{SystemTime, UNIX_EPOCH};

use futures_util::future::join_all;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::Idempotency;
use crate::backend::DataNodes;
use crate::error::LockError;
use crate::guard::LockGuard;
use crate::protocol::call::Call;
use crate::protocol::scripts::WRITE_IF_HELD;
use crate::transport::node::Node;
use crate::util::time::duration_ms;

/// Where records live: every node of the manager (one, or Redlock's N).
pub(super) struct Store {
    nodes: Vec<Node>,
    quorum: usize,
}

impl Store {
    pub(super) fn new(data: DataNodes) -> Self {
        Store {
            nodes: data.nodes,
            quorum: data.quorum,
        }
    }

    /// How many nodes make a record stored: one of one, or Redlock's quorum.
    fn quorum(&self) -> usize {
        self.quorum
    }

    /// The stored value, if there is a record: on one node, the node's record; under Redlock,
    /// the record a quorum of nodes hold (a write that reached fewer nodes never answered
    /// anyone: see [`write`](Self::write)).
    ///
    /// # Errors
    /// [`LockError::Redis`] when the one node fails; [`LockError::QuorumUnreachable`] under
    /// Redlock when the nodes that failed could complete a quorum for a record.
    pub(super) async fn read<T: DeserializeOwned>(
        &self,
        key: &str,
        record_key: &str,
        idem: &Idempotency,
    ) -> Result<Option<T>, LockError> {
        let reads = self.nodes.iter().cloned().map(|mut node| async move {
            redis::cmd("GET")
                .arg(record_key)
                .query_async::<Option<String>>(&mut node)
                .await
        });
        let mut texts: Vec<(String, usize)> = Vec::new();
        let mut failed = Vec::new();
        for reply in join_all(reads).await {
            match reply {
                Ok(Some(text)) => match texts.iter_mut().find(|(seen, _)| *seen == text) {
                    Some((_, count)) => *count += 1,
                    None => texts.push((text, 1)),
                },
                Ok(None) => {}
                Err(error) => failed.push(error),
            }
        }
        let quorum = self.quorum();
        let best = texts.iter().max_by_key(|(_, count)| *count);
        match best {
            Some((text, count)) if *count >= quorum => decode(key, text, idem).map(Some),
            _ if failed.is_empty() => Ok(None),
            best if best.map_or(0, |(_, count)| *count) + failed.len() < quorum => Ok(None),
            _ if self.nodes.len() == 1 => Err(failed.swap_remove(0).into()),
            _ => Err(LockError::QuorumUnreachable {
                reachable: self.nodes.len() - failed.len(),
                needed: quorum,
            }),
        }
    }

    /// Stores `value` under `record_key`, on every node where `guard`'s lock still holds its
    /// value ([`WRITE_IF_HELD`]); stored when a quorum stored it (1 of 1 on one node).
    ///
    /// # Errors
    /// - [`LockError::BadIdempotencyRecord`] when `value` is too large or does not serialize;
    /// - [`LockError::Lost`] (naming the lock key) when the guard is known lost, or so many
    ///   nodes found the lock gone or held by another value that no quorum can have stored;
    /// - [`LockError::Redis`] when a node failed and no quorum stored.
    pub(super) async fn write<T: Serialize>(
        &self,
        key: &str,
        record_key: &str,
        guard: &LockGuard,
        idem: &Idempotency,
        value: &T,
    ) -> Result<(), LockError> {
        let text = encode(key, idem, value)?;
        let lost = || LockError::Lost {
            key: guard.key().to_owned(),
        };
        if !guard.is_held() {
            return Err(lost());
        }
        let ttl_ms = duration_ms(idem.record_ttl);
        let writes = self.nodes.iter().cloned().map(|mut node| {
            let text = &text;
            async move {
                let bytes = guard.key().len() + record_key.len() + text.len() + 64;
                Call::new(&WRITE_IF_HELD, 2, 5, bytes)
                    .arg(guard.key())
                    .arg(record_key)
                    .arg(guard.token())
                    .arg(text)
                    .arg(ttl_ms)
                    .invoke::<i64>(&mut node)
                    .await
            }
        });
        let (mut stored, mut refused, mut first_error) = (0usize, 0usize, None);
        for reply in join_all(writes).await {
            match reply {
                Ok(1) => stored += 1,
                Ok(_) => refused += 1,
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        if stored >= self.quorum() {
            return Ok(());
        }
        match first_error {
            Some(error) if self.nodes.len() - refused >= self.quorum() => Err(error.into()),
            _ => Err(lost()),
        }
    }
}

fn bad(key: &str, reason: String) -> LockError {
    LockError::BadIdempotencyRecord {
        key: key.to_owned(),
        reason,
    }
}

fn encode<T: Serialize>(key: &str, idem: &Idempotency, value: &T) -> Result<String, LockError> {
    let value = serde_json::to_value(value)
        .map_err(|e| bad(key, format!("the value does not serialize: {e}")))?;
    let at_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, duration_ms);
    let record = serde_json::json!({
        "v": 1,
        "at_ms": at_ms,
        "fingerprint": idem.fingerprint,
        "value": value,
    });
    let text = record.to_string();
    if text.len() > Idempotency::MAX_RECORD_BYTES {
        return Err(bad(
            key,
            format!(
                "the record is {} bytes; expected at most {} (nothing was stored)",
                text.len(),
                Idempotency::MAX_RECORD_BYTES
            ),
        ));
    }
    Ok(text)
}

fn decode<T: DeserializeOwned>(key: &str, text: &str, idem: &Idempotency) -> Result<T, LockError> {
    let mut record: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| bad(key, format!("the stored record is not JSON: {e}")))?;
    let stored_fingerprint = record.get("fingerprint").and_then(|f| f.as_str());
    if let (Some(expected), Some(stored)) = (&idem.fingerprint, stored_fingerprint)
        && expected != stored
    {
        return Err(LockError::IdempotencyMismatch {
            key: key.to_owned(),
        });
    }
    let value = record
        .get_mut("value")
        .map(serde_json::Value::take)
        .ok_or_else(|| bad(key, "the stored record has no value".to_owned()))?;
    serde_json::from_value(value).map_err(|e| {
        bad(
            key,
            format!("the stored value does not deserialize into the return type: {e}"),
        )
    })
}
