//! The Lua scripts, kept in process-wide `redis::Script` statics.
//!
//! Each script is hashed once; [`redis::Script::invoke_async`] sends `EVALSHA` and falls back to
//! `EVAL` on `NOSCRIPT` (for example after `SCRIPT FLUSH` or a fail-over). Scripts read only
//! `KEYS` and `ARGV`: user data is never spliced into Lua source.

use once_cell::sync::Lazy;
use redis::Script;

/// Acquire: `SET key token NX PX ttl`, and on success mint the fencing token in the same script.
///
/// - `KEYS[1]` lock key, `KEYS[2]` fencing counter key
/// - `ARGV[1]` token, `ARGV[2]` ttl in ms
///
/// Returns `{1, fencing_token}` when acquired, otherwise `{0, pttl_ms}` of the current holder
/// (`-1`: the key has no expiry).
pub(crate) static ACQUIRE: Lazy<Script> = Lazy::new(|| {
    Script::new(
        r"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, redis.call('INCR', KEYS[2])}
end
return {0, redis.call('PTTL', KEYS[1])}
",
    )
});

/// Release: compare-and-delete, as in the seeds and the Redis `SET` documentation.
///
/// - `KEYS[1]` lock key; `ARGV[1]` token
///
/// Returns 1 when the key held the token and was deleted, 0 otherwise (expired, deleted, or
/// another holder's token): a stale holder never deletes another holder's key.
pub(crate) static RELEASE: Lazy<Script> = Lazy::new(|| {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
",
    )
});

/// Extend and watchdog renewal: compare-and-`PEXPIRE` over one or more keys. Sets the TTL
/// (never adds to it) and never re-creates a missing key.
///
/// - `KEYS[i]` lock keys; `ARGV[2i-1]` the token of `KEYS[i]`, `ARGV[2i]` its new ttl in ms
///
/// Returns one entry per key: 1 when the key held the token and its TTL was set, 0 otherwise.
/// On Redis Cluster all keys of one call must share a slot (one key per call always does).
pub(crate) static RENEW: Lazy<Script> = Lazy::new(|| {
    Script::new(
        r"
local renewed = {}
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[2 * i - 1] then
    renewed[i] = redis.call('PEXPIRE', KEYS[i], ARGV[2 * i])
  else
    renewed[i] = 0
  end
end
return renewed
",
    )
});

/// Loads every script into the node's script cache (`SCRIPT LOAD`), so that the first burst of
/// acquires does not each meet `NOSCRIPT` and load the script again.
pub(crate) async fn preload(conn: &mut redis::aio::ConnectionManager) -> redis::RedisResult<()> {
    for script in [&*ACQUIRE, &*RELEASE, &*RENEW] {
        script.load_async(conn).await?;
    }
    Ok(())
}
