//! Connections: [`Node`](node::Node) (one server, a Redis Cluster or a Sentinel-resolved
//! primary), TLS, and the watch that re-makes a connection whose runtime shut down. Runs no
//! lock script.

pub(crate) mod connect;
pub(crate) mod node;
pub(crate) mod runtime_watch;
pub(crate) mod sentinel;
pub(crate) mod slot;
pub(crate) mod tls;
