//! [`Shared`]: what a manager shares with its guards, waiters and watchdog.

use std::sync::Arc;

use crate::backend::Backend;
use crate::lease::live::LiveLeases;
use crate::lease::watchdog::Watchdog;
use crate::options::LockOptions;
use crate::protocol::fencing::FencingCounter;
use crate::protocol::value::HolderStamp;

/// The state behind a [`LockManager`](crate::manager::LockManager). Guards hold it (not the manager), so
/// the public handle and the internals never call each other in a circle.
pub(crate) struct Shared {
    pub(crate) backend: Backend,
    pub(crate) key_prefix: String,
    pub(crate) default_options: LockOptions,
    pub(crate) fencing_counter: FencingCounter,
    pub(crate) watchdog: Arc<Watchdog>,
    /// The static part of every lock value this manager writes (host, pid, label).
    pub(crate) holder: HolderStamp,
    /// The leases its guards hold now, and whether it is closed.
    pub(crate) live: Arc<LiveLeases>,
}
