//! Connections: [`Node`](node::Node) (one server, a Redis Cluster or a Sentinel-resolved
//! primary) and TLS. Runs no lock script.

pub(crate) mod connect;
pub(crate) mod node;
pub(crate) mod sentinel;
pub(crate) mod slot;
pub(crate) mod tls;
