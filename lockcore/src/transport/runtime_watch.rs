//! [`RuntimeWatch`]: whether the tokio runtime a connection was made on still runs.
//!
//! A redis-rs connection does its I/O in tasks on the runtime that made it. When that runtime
//! shuts down (a `#[tokio::test]` ends, a runtime per request, a `main` that builds several),
//! tokio drops those tasks and every later command on the connection fails with a broken pipe,
//! even from another runtime. The watch is a task on the same runtime that never ends: tokio
//! drops it at shutdown too, and its drop marks the watch, so a connection's owner learns of
//! the shutdown with one atomic load per command and re-makes the connection (on lockcore's
//! background runtime, see `util::background`) before it sends anything.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::runtime::Handle;

use crate::util::defer::OnDrop;

/// Whether the runtime that was current when the watch was made has shut down. Cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct RuntimeWatch {
    shut_down: Arc<AtomicBool>,
}

impl RuntimeWatch {
    /// A watch of the current runtime (made on a runtime that is shutting down, or on no
    /// runtime, it reads as shut down at once: nothing can run there).
    pub(crate) fn current() -> RuntimeWatch {
        let shut_down = Arc::new(AtomicBool::new(false));
        let mark = {
            let shut_down = Arc::clone(&shut_down);
            OnDrop::new(move || shut_down.store(true, Ordering::Release))
        };
        match Handle::try_current() {
            Ok(handle) => drop(handle.spawn(async move {
                let _mark = mark;
                std::future::pending::<()>().await;
            })),
            Err(_) => drop(mark),
        }
        RuntimeWatch { shut_down }
    }

    /// `true` once the watched runtime has shut down (one atomic load).
    pub(crate) fn shut_down(&self) -> bool {
        self.shut_down.load(Ordering::Acquire)
    }
}

/// Whether a connection can be re-made here: only on a tokio runtime (redis-rs spawns its I/O
/// tasks on the current one); asked only when lockcore's background runtime is unavailable.
pub(crate) fn on_a_runtime() -> bool {
    Handle::try_current().is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The watch reads `false` while its runtime runs, `true` once it is dropped, from anywhere.
    #[test]
    fn the_watch_flips_when_its_runtime_shuts_down() {
        let a = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let watch = a.block_on(async { RuntimeWatch::current() });
        assert!(!watch.shut_down(), "runtime A still runs");
        let b = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .expect("runtime");
        let in_b = b.block_on(async { RuntimeWatch::current() });
        drop(a);
        assert!(watch.shut_down(), "runtime A was dropped");
        assert!(!in_b.shut_down(), "runtime B still runs");
        drop(b);
        assert!(in_b.shut_down(), "runtime B was dropped");
        assert!(
            RuntimeWatch::current().shut_down(),
            "no runtime: nothing runs there"
        );
    }
}
