#![doc = include_str!("../README.md")]
#![deny(missing_docs, missing_debug_implementations)]

mod backend;
mod builder;
mod defer;
mod error;
mod escape;
mod fenced;
mod fencing;
mod global;
mod guard;
mod handoff;
pub mod holder;
#[cfg(feature = "idempotency")]
mod idempotency;
mod key;
mod lease;
mod live;
mod manager;
mod multi;
mod node;
mod options;
mod promotion;
mod redact;
mod redlock;
mod reentrancy;
mod renew;
mod replicas;
mod round_trip;
mod scripts;
mod sentinel;
mod shared;
mod single;
mod slot;
mod spawn;
mod telemetry;
mod tls;
mod vote;
mod watchdog;

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;

pub use builder::LockManagerBuilder;
pub use error::LockError;
pub use fenced::{FenceError, FenceGate, FencedRedis, StaleWrite};
pub use fencing::FencingCounter;
pub use global::{default_manager, set_default_manager};
pub use guard::LockGuard;
#[cfg(feature = "idempotency")]
pub use idempotency::Idempotency;
pub use key::DEFAULT_KEY_PREFIX;
pub use manager::LockManager;
pub use multi::MultiGuard;
pub use options::LockOptions;
pub use redact::redact_url;

#[cfg(feature = "macros")]
pub use lockmacro::distributed_lock;
#[cfg(all(feature = "macros", feature = "idempotency"))]
pub use lockmacro::idempotent;
