//! What builds on the lock manager: several keys at once, semaphores and read-write locks,
//! reentrancy, idempotency records, fenced resources, leader election and who holds a key.

pub mod admin;
pub(crate) mod election;
pub(crate) mod fenced;
pub(crate) mod holder;
#[cfg(feature = "idempotency")]
pub(crate) mod idempotency;
pub(crate) mod multi;
pub(crate) mod reentrancy;
pub(crate) mod rwlock;
pub(crate) mod semaphore;
