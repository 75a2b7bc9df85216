//! [`WaitForReplicas`]: `WAIT replicas timeout` after each acquire and extend.

use std::time::Duration;

use redis::aio::ConnectionLike as _;

use crate::LockError;
use crate::node::Node;
use crate::options::duration_ms;

/// How many replicas must acknowledge a lock write, and how long to wait for them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WaitForReplicas {
    pub(crate) replicas: usize,
    pub(crate) timeout: Duration,
}

impl WaitForReplicas {
    /// Sends `WAIT` on the connection that wrote `key` (on a cluster, to the primary of its
    /// slot), so that it covers that write.
    ///
    /// # Errors
    /// [`LockError::NotReplicated`] when fewer replicas acknowledged within the timeout;
    /// [`LockError::Redis`] when `WAIT` itself failed.
    pub(crate) async fn wait(&self, node: &Node, key: &str) -> Result<(), LockError> {
        let mut cmd = redis::cmd("WAIT");
        cmd.arg(self.replicas).arg(duration_ms(self.timeout));
        let reply = match node {
            Node::Cluster(conn) => {
                use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
                let slot = crate::slot::key_hash_slot(key.as_bytes());
                let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(
                    Route::new(slot, SlotAddr::Master),
                ));
                conn.clone().route_command(cmd, route).await?
            }
            other => other.clone().req_packed_command(&cmd).await?,
        };
        let acked: usize = redis::from_redis_value(reply).map_err(redis::RedisError::from)?;
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
