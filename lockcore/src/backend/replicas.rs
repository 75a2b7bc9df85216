//! [`WaitForReplicas`]: `WAIT replicas timeout` after each acquire and extend, in one pipeline
//! with the script call whose write it covers.

use std::time::Duration;

use redis::{FromRedisValue, Pipeline, Value};

use crate::error::LockError;
use crate::protocol::call::Call;
use crate::protocol::explain::explain;
use crate::transport::node::Node;
use crate::util::time::duration_ms;

/// How many replicas must acknowledge a lock write, and how long to wait for them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WaitForReplicas {
    pub(crate) replicas: usize,
    pub(crate) timeout: Duration,
}

impl WaitForReplicas {
    /// Sends `call` (a script call that writes `key`) and `WAIT` as one pipeline, on one
    /// connection (on a cluster, to the primary of `key`'s slot): `WAIT` counts the replicas
    /// that acknowledged the writes of the connection that sends it, so it must be the
    /// connection that wrote. Sent apart, a connection swapped in between (a Sentinel
    /// fail-over, a reconnect) would send `WAIT` from a connection that wrote nothing, and it
    /// would succeed at once. After `NOSCRIPT` the script is loaded and the pipeline sent
    /// again. Returns the script's reply and the number of replicas that acknowledged.
    ///
    /// # Errors
    /// [`LockError::Redis`] when the pipeline, the script or `WAIT` failed (an ACL refusal in
    /// the script is [`explain`](crate::protocol::explain::explain)ed).
    pub(crate) async fn invoke<T: FromRedisValue>(
        &self,
        node: &Node,
        call: &Call<'_>,
        key: &str,
    ) -> Result<(T, usize), LockError> {
        let (script, cmd) = call.parts();
        let mut pipeline = redis::pipe();
        pipeline.add_command(cmd.clone());
        pipeline
            .cmd("WAIT")
            .arg(self.replicas)
            .arg(duration_ms(self.timeout));
        let mut replies = send(node, &pipeline, key).await?;
        if matches!(replies.first(), Some(Value::ServerError(error))
            if error.kind() == Some(redis::ServerErrorKind::NoScript))
        {
            call.load(&mut node.clone()).await?;
            replies = send(node, &pipeline, key).await?;
        }
        let [reply, acked] = <[Value; 2]>::try_from(replies).map_err(|replies| {
            redis::RedisError::from((
                redis::ErrorKind::Client,
                "unexpected reply to a script call and its `WAIT`",
                format!("{replies:?}; expected two replies"),
            ))
        })?;
        let reply = reply
            .extract_error()
            .and_then(|reply| T::from_redis_value(reply).map_err(redis::RedisError::from))
            .map_err(|error| explain(script, error))?;
        let acked = acked
            .extract_error()
            .and_then(|acked| usize::from_redis_value(acked).map_err(redis::RedisError::from))?;
        Ok((reply, acked))
    }

    /// `Ok` when `acked` replicas are enough.
    ///
    /// # Errors
    /// [`LockError::NotReplicated`] naming `key` when fewer replicas acknowledged.
    pub(crate) fn check(&self, key: &str, acked: usize) -> Result<(), LockError> {
        if acked >= self.replicas {
            Ok(())
        } else {
            Err(LockError::NotReplicated {
                key: key.to_owned(),
                acked,
                needed: self.replicas,
            })
        }
    }
}

/// `pipeline` on one connection of `node`: on a cluster, the primary of `key`'s slot.
async fn send(node: &Node, pipeline: &Pipeline, key: &str) -> redis::RedisResult<Vec<Value>> {
    node.pipeline_for_key(pipeline, key).await
}
