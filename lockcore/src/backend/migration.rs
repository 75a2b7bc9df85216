//! A Redis Cluster slot migration costs latency, not errors: what [`Single`] does when Redis
//! refuses a call because the lock's slot is being moved.
//!
//! While a slot is `MIGRATING` (on its owner) or `IMPORTING` (on the target), Redis runs a call
//! of several keys only when the node has every key it declares; one missing key gets
//! `TRYAGAIN`, even when no key has moved yet. lockcore's scripts declare keys that often do
//! not exist: the share set of a plain lock, the waiter queue and its entries when nobody
//! waits. So:
//! - a plain lock's release that is refused is sent again without the share set (the hand-over
//!   to a waiter still works: every queue key exists while someone waits); refused again, and
//!   with no waiter queued anywhere (an `EXISTS` of the queue, which the cluster client follows
//!   to wherever the queue is), it is the compare-and-delete of the lock key alone
//!   ([`release_narrower`](Single::release_narrower));
//! - a waiter's refused re-check is sent again without the share set (`acquire_queued.lua`
//!   allows it), so the waiter refreshes its entry and keeps its turn while the lock is held;
//! - what is still refused (the keys split between the two nodes by a `MIGRATE` under way, a
//!   share's call with nobody queued) is sent again until it runs, for at most the response
//!   timeout and never past the lease ([`wait_out`]): release, extend and renewal.
//!
//! A refusal is told by [`LockError::script_never_ran`] (nothing was written), the same test
//! by which an acquire waits refusals out within its wait budget (`waiting`).

use std::time::Duration;

use tokio::time::Instant;

use crate::backend::Hold;
use crate::backend::single::Single;
use crate::error::LockError;
use crate::protocol::call::Call;
use crate::protocol::keyspace;
use crate::protocol::scripts;
use crate::protocol::value::LockValue;
use crate::util::time::duration_ms;

/// The first pause before a refused call is sent again; each next pause doubles, up to
/// [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(10);
const MAX_PAUSE: Duration = Duration::from_millis(100);
/// The most sends of one refused call.
const MAX_SENDS: usize = 64;

/// Sends `call` again while Redis Cluster refuses it before running it
/// ([`LockError::script_never_ran`]), pausing 10 ms, then twice as long each time up to
/// 100 ms, until `until` (at most 64 sends). Returns the first answer that is not a refusal,
/// or the last refusal.
///
/// # Errors
/// `call`'s error.
pub(crate) async fn wait_out<T, F, Fut>(until: Instant, mut call: F) -> Result<T, LockError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, LockError>>,
{
    let mut pause = FIRST_PAUSE;
    for _ in 1..MAX_SENDS {
        match call().await {
            Err(err) if err.script_never_ran() && Instant::now() + pause < until => {
                tracing::debug!(error = %err, "lock script refused during a cluster change; sending it again");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(MAX_PAUSE);
            }
            answer => return answer,
        }
    }
    call().await
}

impl Single {
    /// Until when a refused call of a lease that ends at `deadline` (if known) is sent again:
    /// the response timeout from now, never past the deadline.
    pub(crate) fn refusals_until(&self, deadline: Option<Instant>) -> Instant {
        let bound = Instant::now() + self.response_timeout;
        deadline.map_or(bound, |deadline| deadline.min(bound))
    }

    /// A plain lock's release whose full call was `refused` (see the module docs): without the
    /// share set, then, with no waiter queued, the compare-and-delete of the lock key alone
    /// (keeping a minimum `hold`). The reply is `release_handoff.lua`'s: 1 released, 0 not
    /// held (the compare-and-delete cannot tell a missing key from another holder's), -1
    /// another holder's.
    ///
    /// # Errors
    /// The refusal when every narrower call is refused too, or waiters are queued; any other
    /// error of the calls.
    pub(super) async fn release_narrower(
        &self,
        key: &str,
        value: &LockValue,
        hold: Option<Hold>,
        refused: LockError,
    ) -> Result<i64, LockError> {
        if value.share().is_some() {
            return Err(refused);
        }
        let mut node = self.node.clone();
        let without_shares = self.release_call(key, value, hold, false);
        match without_shares
            .invoke::<i64>(&mut node)
            .await
            .map_err(LockError::from)
        {
            Err(err) if err.script_never_ran() => {}
            answer => return answer,
        }
        let queue = keyspace::queue_key(&self.key_prefix, key);
        let waiters: bool = redis::cmd("EXISTS")
            .arg(&queue)
            .query_async(&mut node)
            .await?;
        if waiters {
            return Err(refused);
        }
        let mut call = Call::new(&scripts::RELEASE, 1, 4, key.len() + value.as_str().len());
        call.arg(key).arg(value);
        if let Some(hold) = hold {
            call.arg(duration_ms(hold.at_least))
                .arg(duration_ms(hold.ttl));
        }
        Ok(call.invoke::<i64>(&mut node).await?)
    }

    /// The release script's call for `value` on `key`, with the share set or without it (a
    /// plain lock's release during a slot migration); with `hold`, a plain lock keeps its
    /// minimum.
    pub(super) fn release_call(
        &self,
        key: &str,
        value: &LockValue,
        hold: Option<Hold>,
        with_shares: bool,
    ) -> Call<'static> {
        let (queue, entries) = keyspace::waiter_queue_keys(&self.key_prefix, key);
        let counter = keyspace::counter_key(&self.key_prefix, key, self.fencing_counter);
        let shares = with_shares.then(|| keyspace::shares_key(&self.key_prefix, key));
        let bytes = key.len()
            + counter.len()
            + queue.len()
            + entries.len()
            + shares.as_ref().map_or(0, String::len)
            + value.as_str().len();
        let script = match value.share() {
            None => &scripts::RELEASE_HANDOFF,
            Some(_) => &scripts::RELEASE_SHARE,
        };
        let keys = 4 + usize::from(shares.is_some());
        let mut call = Call::new(script, keys, keys + 3, bytes);
        call.arg(key).arg(&counter).arg(&queue).arg(&entries);
        if let Some(shares) = &shares {
            call.arg(shares);
        }
        call.arg(value);
        // A share's release keeps no minimum: `hold_at_least` is refused for shares.
        if let (Some(hold), None) = (hold, value.share()) {
            call.arg(duration_ms(hold.at_least))
                .arg(duration_ms(hold.ttl));
        }
        call
    }
}
