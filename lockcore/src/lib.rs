#![doc = include_str!("../README.md")]
#![deny(missing_docs, missing_debug_implementations)]

mod backend;
mod builder;
mod error;
mod features;
mod global;
mod guard;
mod lease;
mod manager;
mod options;
mod protocol;
mod shared;
mod transport;
mod util;

#[doc(hidden)]
pub mod __private;

pub use builder::LockManagerBuilder;
pub use error::LockError;
pub use features::fenced::gate::FenceGate;
pub use features::fenced::redis::FencedRedis;
pub use features::fenced::stale::{FenceError, StaleWrite};
#[cfg(feature = "idempotency")]
pub use features::idempotency::Idempotency;
pub use features::multi::MultiGuard;
pub use global::{default_manager, set_default_manager};
pub use guard::LockGuard;
pub use manager::LockManager;
pub use options::LockOptions;
pub use protocol::fencing::FencingCounter;
pub use protocol::keyspace::{self, DEFAULT_KEY_PREFIX};
pub use util::redact::redact_url;

#[cfg(feature = "macros")]
pub use lockmacro::distributed_lock;
#[cfg(all(feature = "macros", feature = "idempotency"))]
pub use lockmacro::idempotent;
