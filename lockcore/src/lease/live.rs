//! [`LiveLeases`]: every lease a manager's guards hold now, so that
//! [`LockManager::close`](crate::manager::LockManager::close) can release them, and whether the manager
//! is closed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use crate::lease::state::Lease;

/// The live leases of one manager, by registration id.
#[derive(Debug, Default)]
pub(crate) struct LiveLeases {
    leases: Mutex<HashMap<u64, Weak<Lease>>>,
    next_id: AtomicU64,
    closed: AtomicBool,
}

/// A lease's place in [`LiveLeases`]; dropping it removes the lease.
#[derive(Debug)]
pub(crate) struct LiveEntry {
    live: Weak<LiveLeases>,
    id: u64,
}

impl Drop for LiveEntry {
    fn drop(&mut self) {
        if let Some(live) = self.live.upgrade() {
            live.lock().remove(&self.id);
        }
    }
}

impl LiveLeases {
    fn lock(&self) -> MutexGuard<'_, HashMap<u64, Weak<Lease>>> {
        // Map updates never panic half-way; a poisoned lock still holds a valid map.
        self.leases.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds `lease` until the returned entry is dropped.
    pub(crate) fn register(self: &Arc<Self>, lease: &Arc<Lease>) -> LiveEntry {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(id, Arc::downgrade(lease));
        LiveEntry {
            live: Arc::downgrade(self),
            id,
        }
    }

    /// Whether [`close`](Self::close) was called.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Marks the manager closed and takes every lease still registered. Later calls take
    /// nothing more than what was registered since.
    pub(crate) fn close(&self) -> Vec<Arc<Lease>> {
        self.closed.store(true, Ordering::Release);
        self.lock()
            .drain()
            .filter_map(|(_, lease)| lease.upgrade())
            .collect()
    }
}
