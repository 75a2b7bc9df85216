#![doc = include_str!("../../README.md")]
#![deny(missing_docs, missing_debug_implementations)]

mod error;
mod fenced;
mod fencing;
mod global;
mod guard;
mod handoff;
mod key;
mod lease;
mod manager;
mod options;
mod redlock;
mod release;
mod scripts;
mod slot;
mod watchdog;

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;

pub use error::LockError;
pub use fenced::{FenceError, FenceGate, FencedRedis, StaleWrite};
pub use fencing::FencingCounter;
pub use global::{default_manager, set_default_manager};
pub use guard::LockGuard;
pub use key::DEFAULT_KEY_PREFIX;
pub use manager::{LockManager, LockManagerBuilder};
pub use options::LockOptions;

#[cfg(feature = "macros")]
pub use lockmacro::distributed_lock;

/// Every future this crate hands out is `Send`, so it can be `tokio::spawn`ed.
#[cfg(test)]
mod send_checks {
    use super::*;
    use std::time::Duration;

    fn assert_send<T: Send>(_: &T) {}

    #[allow(dead_code, clippy::let_underscore_future)]
    async fn futures_are_send(manager: LockManager, mut guard: LockGuard) {
        let opts = LockOptions::default();
        assert_send(&LockManager::connect("redis://127.0.0.1:1/"));
        assert_send(&manager.acquire("k", &opts));
        assert_send(&manager.try_acquire("k", &opts));
        assert_send(&guard.lost());
        assert_send(&guard.extend(Duration::from_secs(1)));
        let body = async { 1 };
        assert_send(&__private::run_body(&guard, __private::OnLost::Abort, body));
        assert_send(&guard.release());
    }
}
