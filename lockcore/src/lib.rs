#![doc = include_str!("../README.md")]
#![deny(missing_docs, missing_debug_implementations)]

mod builder;
mod error;
mod fenced;
mod fencing;
mod global;
mod guard;
mod handoff;
pub mod holder;
mod key;
mod lease;
mod manager;
mod options;
mod redlock;
mod release;
mod scripts;
mod slot;
mod telemetry;
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
pub use key::DEFAULT_KEY_PREFIX;
pub use manager::LockManager;
pub use options::LockOptions;

#[cfg(feature = "macros")]
pub use lockmacro::distributed_lock;
