//! The resource side of fencing: [`FencedRedis`](redis::FencedRedis) (a Redis key),
//! [`FenceGate`](gate::FenceGate) (in-process state), and why they refuse a write. The rule,
//! the SQL pattern and the limits are documented on `FencedRedis`, where rustdoc shows them.

pub(crate) mod gate;
pub(crate) mod redis;
pub(crate) mod stale;
