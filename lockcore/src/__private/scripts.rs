//! Not public API: lockcore's lock scripts as the library calls them, for the model's
//! differential test (`model/tests/differential.rs`), which runs the same calls against a real
//! server and against the model's re-statement of each script.

use std::time::Duration;

use crate::protocol::call::Call;
use crate::protocol::lua::Lua;
use crate::protocol::messages::QueueTicket;
use crate::protocol::scripts;

/// One of the lock scripts (`lockcore/src/protocol/lua/<name>.lua`, assembled with its helpers
/// and lockcore's constants).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Script {
    /// `acquire_queued.lua`.
    AcquireQueued,
    /// `release_handoff.lua`.
    ReleaseHandoff,
    /// `acquire.lua`.
    Acquire,
    /// `release.lua`.
    Release,
    /// `renew.lua`.
    Renew,
    /// `acquire_all.lua`.
    AcquireAll,
    /// `raise_counter.lua`.
    RaiseCounter,
}

impl Script {
    fn lua(self) -> &'static Lua {
        match self {
            Script::AcquireQueued => &scripts::ACQUIRE_QUEUED,
            Script::ReleaseHandoff => &scripts::RELEASE_HANDOFF,
            Script::Acquire => &scripts::ACQUIRE,
            Script::Release => &scripts::RELEASE,
            Script::Renew => &scripts::RENEW,
            Script::AcquireAll => &scripts::ACQUIRE_ALL,
            Script::RaiseCounter => &scripts::RAISE_COUNTER,
        }
    }
}

/// Calls `script` with `keys` and `args` on `conn` the way the library does: one `EVALSHA`
/// built by lockcore's `Call`, the script loaded and the call sent again on `NOSCRIPT`.
///
/// # Errors
/// The server's error reply (a script error, an unreachable server).
pub async fn call(
    script: Script,
    keys: &[&str],
    args: &[&str],
    conn: &mut impl redis::aio::ConnectionLike,
) -> redis::RedisResult<redis::Value> {
    let bytes = keys.iter().chain(args).map(|s| s.len()).sum();
    let mut call = Call::new(script.lua(), keys.len(), keys.len() + args.len(), bytes);
    for arg in keys.iter().chain(args) {
        call.arg(*arg);
    }
    call.send(conn).await
}

/// The ticket argument of `acquire_queued.lua` for attempt `seq` (`None`: mode 0, an
/// attempt that never queues), as `backend/waiting.rs` sends it.
pub fn ticket(seq: Option<u64>, claim: Duration, lease: Duration, channel: &str) -> String {
    let ticket = seq.map(|seq| QueueTicket {
        channel,
        seq,
        claim,
        lease,
    });
    QueueTicket::encode(ticket.as_ref())
}
