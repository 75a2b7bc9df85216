//! The process-wide default manager, used by `#[distributed_lock]` without `manager = ..`.

use once_cell::sync::OnceCell;

use crate::error::LockError;
use crate::manager::LockManager;

static DEFAULT_MANAGER: OnceCell<LockManager> = OnceCell::new();

/// Sets the process-wide default manager. Call it once at start-up. It serves every tokio
/// runtime, also after the one it was built on has shut down (a runtime per `#[tokio::test]`):
/// see [`LockManager`]'s runtime notes.
///
/// # Errors
/// [`LockError::DefaultManagerAlreadySet`] when a default manager is already set; the first
/// one stays in place (no silent replace).
///
/// ```no_run
/// # async fn demo() -> Result<(), lockcore::LockError> {
/// let locks = lockcore::LockManager::connect("redis://127.0.0.1:6380/").await?;
/// lockcore::set_default_manager(locks)?;
/// # Ok(()) }
/// ```
pub fn set_default_manager(manager: LockManager) -> Result<(), LockError> {
    DEFAULT_MANAGER
        .set(manager)
        .map_err(|_| LockError::DefaultManagerAlreadySet)
}

/// The process-wide default manager (a cheap clone of the handle).
///
/// # Errors
/// [`LockError::NoDefaultManager`] when [`set_default_manager`] has not been called.
pub fn default_manager() -> Result<LockManager, LockError> {
    DEFAULT_MANAGER
        .get()
        .cloned()
        .ok_or(LockError::NoDefaultManager)
}
