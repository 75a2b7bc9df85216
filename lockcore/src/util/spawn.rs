//! Where background work runs: the one policy for every task this crate spawns (the watchdog,
//! hand-off listeners, releases of dropped guards and cleanups), except work moved to lockcore's
//! background runtime once its runtime shut down (see `util::background`).

use tokio::runtime::Handle;

/// Spawns `task` on the caller's tokio runtime when there is one, otherwise on `fallback` (the
/// runtime the manager was built on). The caller's runtime comes first because the manager's
/// own may have shut down (a runtime per test). A runtime that has shut down drops the task
/// unrun; tasks that must leave a trace then carry an [`OnDrop`](crate::util::defer::OnDrop).
pub(crate) fn background<F>(fallback: &Handle, task: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    let handle = Handle::try_current().unwrap_or_else(|_| fallback.clone());
    // The join handle is not needed: every task ends on its own, bounded.
    drop(handle.spawn(task));
}
