//! Compare-and-delete paths that do not go through [`LockGuard::release`](crate::LockGuard):
//! cleanup after an acquire whose reply was lost or whose future was dropped, and the release
//! spawned by a guard's `Drop`.

use std::time::Duration;

use tokio::time::Instant;

use crate::LockManager;

/// Compare-and-delete with retries, for background use. Gives up once `ttl` has passed (the
/// key has expired by then) or after 16 attempts, whichever comes first.
pub(crate) async fn release_with_retries(
    manager: LockManager,
    key: String,
    token: String,
    ttl: Duration,
) {
    let give_up_at = Instant::now() + ttl;
    let mut delay = Duration::from_millis(10);
    for _ in 0..16 {
        match manager.nodes().release(&key, &token, ttl).await {
            Ok(_) => return,
            Err(err) => {
                tracing::debug!(key, error = %err, "background release failed; retrying");
            }
        }
        if Instant::now() + delay >= give_up_at {
            break;
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(1));
    }
    tracing::warn!(
        key,
        "background release gave up; the key expires with its TTL"
    );
}

/// Logs that a key is left to its TTL, unless disarmed: travels inside a spawned release, so
/// that a runtime which drops the task unrun (it has shut down) still leaves a trace.
pub(crate) struct LeftToTtl {
    key: String,
    armed: bool,
}

impl LeftToTtl {
    pub(crate) fn new(key: String) -> Self {
        LeftToTtl { key, armed: true }
    }

    /// The release task ran.
    pub(crate) fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for LeftToTtl {
    fn drop(&mut self) {
        if self.armed {
            tracing::warn!(
                key = self.key,
                "no runtime could run the release; the key expires with its TTL"
            );
        }
    }
}

/// Armed while an acquire request is in flight. If the acquiring future is dropped before the
/// reply is read, `Drop` spawns a compare-and-delete of the attempt's token, so a `SET NX` that
/// reached Redis leaves no orphan lock. The cleanup travels on the same multiplexed connection,
/// after the `SET`.
pub(crate) struct PendingAcquire<'a> {
    manager: &'a LockManager,
    key: &'a str,
    token: &'a str,
    ttl: Duration,
    armed: bool,
}

impl<'a> PendingAcquire<'a> {
    pub(crate) fn new(
        manager: &'a LockManager,
        key: &'a str,
        token: &'a str,
        ttl: Duration,
    ) -> Self {
        PendingAcquire {
            manager,
            key,
            token,
            ttl,
            armed: true,
        }
    }

    /// The reply arrived: nothing to clean up here.
    pub(crate) fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for PendingAcquire<'_> {
    fn drop(&mut self) {
        if self.armed {
            tracing::debug!(
                key = self.key,
                "acquire dropped in flight; releasing its token"
            );
            self.manager
                .spawn_release(self.key.to_owned(), self.token.to_owned(), self.ttl);
        }
    }
}
