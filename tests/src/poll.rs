//! Bounded polling: every wait in the harness has a deadline and a count.

use std::thread;
use std::time::{Duration, Instant};

/// Call `probe` every `every` until it returns `Ok`, at most until `timeout`
/// has passed. The error is the last probe's, with the time waited.
pub(crate) fn poll_sync<T>(
    timeout: Duration,
    every: Duration,
    mut probe: impl FnMut() -> Result<T, String>,
) -> Result<T, String> {
    let started = Instant::now();
    let max_polls = max_polls(timeout, every);
    let mut last = String::from("never probed");
    for _ in 0..max_polls {
        match probe() {
            Ok(value) => return Ok(value),
            Err(e) => last = e,
        }
        if started.elapsed() >= timeout {
            break;
        }
        thread::sleep(every);
    }
    Err(format!("not within {:?}: {last}", started.elapsed()))
}

/// The async twin of [`poll_sync`]: sleeps with tokio, so other tasks (a lock
/// holder's watchdog, say) keep running while the harness waits.
pub(crate) async fn poll_async<T, F, Fut>(
    timeout: Duration,
    every: Duration,
    mut probe: F,
) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let started = Instant::now();
    let max_polls = max_polls(timeout, every);
    let mut last = String::from("never probed");
    for _ in 0..max_polls {
        match probe().await {
            Ok(value) => return Ok(value),
            Err(e) => last = e,
        }
        if started.elapsed() >= timeout {
            break;
        }
        tokio::time::sleep(every).await;
    }
    Err(format!("not within {:?}: {last}", started.elapsed()))
}

/// Enough polls to cover `timeout` (a probe may itself take time, so the
/// deadline usually ends the loop first).
fn max_polls(timeout: Duration, every: Duration) -> u128 {
    timeout.as_millis() / every.as_millis().max(1) + 2
}
