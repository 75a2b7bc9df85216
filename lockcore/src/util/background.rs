//! The process-wide lockcore background runtime: where work goes once the runtime it ran on
//! has shut down, so that it no longer dies with any caller's runtime.
//!
//! One thread running a `current_thread` tokio runtime, started lazily by the first call that
//! needs it (a manager whose runtime is still running never starts it) and alive until the
//! process exits. It serves three things: the connections a node re-makes after its runtime
//! shut down (and every command on them), and the watchdog's scheduler and the hand-off
//! listener when the runtime they ran on shut down while they still had work.

use std::sync::OnceLock;

use tokio::runtime::{Builder, Handle};

/// The background runtime's handle, once it runs (`None` if its thread could not be started).
static RUNTIME: OnceLock<Option<Handle>> = OnceLock::new();

/// The background runtime, started on the first call; `None` when the OS refused its thread
/// or runtime (then work stays on the caller's runtime; a revived connection's commands fail
/// with a client error).
pub(crate) fn handle() -> Option<&'static Handle> {
    RUNTIME.get_or_init(start).as_ref()
}

fn start() -> Option<Handle> {
    let runtime = match Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            tracing::error!(%error, "cannot build lockcore's background runtime");
            return None;
        }
    };
    let handle = runtime.handle().clone();
    let thread = std::thread::Builder::new()
        .name("lockcore-background".to_owned())
        .spawn(move || runtime.block_on(std::future::pending::<()>()));
    match thread {
        Ok(_) => Some(handle),
        Err(error) => {
            tracing::error!(%error, "cannot start lockcore's background runtime thread");
            None
        }
    }
}

/// Runs `task` on the background runtime and waits for its output from wherever the caller
/// runs (any runtime, or none). `None` when the background runtime is unavailable or the task
/// panicked.
pub(crate) async fn run<F>(task: F) -> Option<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    handle()?.spawn(task).await.ok()
}

/// [`run`] of a Redis call: its reply, or a client error when the background runtime is
/// unavailable or the call panicked. Once a connection's first runtime is gone, its commands go
/// this way: a reconnect of redis-rs' `ConnectionManager` (or the cluster client) starts on the
/// runtime of the call that noticed the failure, so calls made here keep every I/O task of the
/// connection on the background runtime.
pub(crate) async fn run_command<T: Send + 'static>(
    call: impl Future<Output = redis::RedisResult<T>> + Send + 'static,
) -> redis::RedisResult<T> {
    run(call).await.unwrap_or_else(|| {
        Err(redis::RedisError::from((
            redis::ErrorKind::Client,
            "a lock command on lockcore's background runtime did not complete (the runtime is unavailable, or the command panicked)",
        )))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Work sent there completes after the caller's runtime that sent it has shut down; its
    /// output reaches a caller on another runtime.
    #[test]
    fn runs_after_the_callers_runtime_is_gone() {
        let (tx, rx) = std::sync::mpsc::channel();
        let caller = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        caller.block_on(async {
            let handle = handle().expect("the background runtime");
            drop(handle.spawn(async move {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                let _ = tx.send(7);
            }));
        });
        drop(caller);
        assert_eq!(
            rx.recv_timeout(std::time::Duration::from_secs(10)),
            Ok(7),
            "the task outlived its caller's runtime"
        );
        let other = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        assert_eq!(other.block_on(run(async { 2 + 2 })), Some(4));
    }
}
