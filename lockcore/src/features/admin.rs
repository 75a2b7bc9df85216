//! Operator actions on a lock that this process does not hold (what `lockctl release --force`
//! runs), through the library's own release script.

use crate::error::LockError;
use crate::protocol::call::Call;
use crate::protocol::explain::explain;
use crate::protocol::{keyspace, scripts};

/// The script `lockctl` reads a key with: its type, its value when it is a string, its PTTL
/// and the clock of the node that holds it, in one atomic call that writes nothing. Send it as
/// `EVAL <this text> 1 <key>` (in a pipeline of many keys, if you like); the reply is
/// `[type, value or nil, pttl_ms, seconds, microseconds]`, the type `none` for a missing key
/// and the value nil unless the key is a string. The PTTL is -1 for a key without expiry and
/// -2 for a missing one, as `PTTL` says.
pub const READ_KEY_SCRIPT: &str = scripts::READ_KEY;

/// What [`force_release`] found at the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForceRelease {
    /// The key held a value with the given token; it was deleted, or handed to the first live
    /// waiter in its queue, exactly as the holder's own release would have done.
    Released,
    /// The key was missing (the lease had ended or someone released it first).
    Missing,
    /// The key held another holder's token, or a value of another type: nothing was changed.
    HeldByOther,
}

/// Releases the lock at `key` (the full Redis key, prefix included) if it is held by the lock
/// value `value` (its first word, the token, is compared, as a holder's release compares):
/// compare-and-delete with hand-off, in one script call on `conn`, which must serve `key`
/// (a plain connection, or a cluster connection that routes by key). `prefix` is the lock
/// manager's key prefix, which names the waiter queue.
///
/// The marker of shares ([`SHARES_MARKER`](crate::keyspace::SHARES_MARKER)) is no holder: for
/// it this is [`ForceRelease::HeldByOther`] with nothing sent; [`force_release_share`] frees
/// one share.
///
/// A waiter of the key is handed the lock as by its holder's release when its manager mints no
/// fencing token; one that does is woken to take the key itself, so its fencing token still
/// comes from its own counter.
///
/// # Errors
/// [`LockError::Redis`] when the server refuses the call or the connection fails (an ACL that
/// lacks a command of the release is explained in the message).
///
/// ```no_run
/// # async fn run() -> Result<(), lockcore::LockError> {
/// let client = redis::Client::open("redis://127.0.0.1:6380/")?;
/// let mut conn = client.get_multiplexed_async_connection().await?;
/// let outcome = lockcore::admin::force_release(&mut conn, "lock:", "lock:order:1", b"tok").await?;
/// assert_eq!(outcome, lockcore::admin::ForceRelease::Released);
/// # Ok(()) }
/// ```
pub async fn force_release(
    conn: &mut impl redis::aio::ConnectionLike,
    prefix: &str,
    key: &str,
    value: &[u8],
) -> Result<ForceRelease, LockError> {
    // The marker of shares is no holder: releasing it would leave the shares unguarded (see
    // `force_release_share` for one share).
    if value
        .strip_prefix(keyspace::SHARES_MARKER.as_bytes())
        .is_some_and(|rest| rest.is_empty() || rest[0] == b' ')
    {
        return Ok(ForceRelease::HeldByOther);
    }
    let (queue, entries) = keyspace::waiter_queue_keys(prefix, key);
    // The lock key as the counter: no other slot is touched, and a waiter with a counter of
    // its own re-checks instead of taking a token minted elsewhere.
    let bytes = 2 * key.len() + queue.len() + entries.len() + value.len();
    let reply: i64 = Call::new(&scripts::RELEASE_HANDOFF, 4, 5, bytes)
        .arg(key)
        .arg(key)
        .arg(&queue)
        .arg(&entries)
        .arg(value)
        .send(conn)
        .await
        .map_err(|e| explain(&scripts::RELEASE_HANDOFF, e))?;
    Ok(match reply {
        1 => ForceRelease::Released,
        0 => ForceRelease::Missing,
        _ => ForceRelease::HeldByOther,
    })
}

/// Releases one share of `key` (a semaphore's permit or a reader's share, the full Redis key,
/// prefix included) held by `token`, as its holder's release would: the share is removed, and
/// the waiters at the head of the queue are served as far as they now fit (a waiter whose
/// manager mints fencing tokens is woken to take its turn itself, as in [`force_release`]).
/// `conn` and `prefix` as for [`force_release`]. The marker at the key (whose first word is
/// [`SHARES_MARKER`](crate::keyspace::SHARES_MARKER)) is no share: it is never released here.
///
/// Returns [`ForceRelease::Released`] when `token` held a live share, and
/// [`ForceRelease::Missing`] otherwise (its lease had ended, or it held none).
///
/// # Errors
/// As [`force_release`].
pub async fn force_release_share(
    conn: &mut impl redis::aio::ConnectionLike,
    prefix: &str,
    key: &str,
    token: &str,
) -> Result<ForceRelease, LockError> {
    let (queue, entries) = keyspace::waiter_queue_keys(prefix, key);
    let shares = keyspace::shares_key(prefix, key);
    let bytes = 2 * key.len() + queue.len() + entries.len() + shares.len() + token.len();
    let reply: i64 = Call::new(&scripts::RELEASE_SHARE, 5, 6, bytes)
        .arg(key)
        .arg(key)
        .arg(&queue)
        .arg(&entries)
        .arg(&shares)
        .arg(token)
        .send(conn)
        .await
        .map_err(|e| explain(&scripts::RELEASE_SHARE, e))?;
    Ok(match reply {
        1 => ForceRelease::Released,
        _ => ForceRelease::Missing,
    })
}
