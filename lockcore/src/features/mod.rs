//! What builds on the lock manager: several keys at once, semaphores and read-write locks,
//! reentrancy, idempotency records, and fenced resources.

pub mod admin;
pub(crate) mod fenced;
#[cfg(feature = "idempotency")]
pub(crate) mod idempotency;
pub(crate) mod multi;
pub(crate) mod reentrancy;
pub(crate) mod rwlock;
pub(crate) mod semaphore;
