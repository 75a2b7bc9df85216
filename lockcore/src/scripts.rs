//! The Lua scripts, kept in process-wide `redis::Script` statics.
//!
//! Each script is hashed once; [`redis::Script::invoke_async`] sends `EVALSHA` and falls back to
//! `EVAL` on `NOSCRIPT` (for example after `SCRIPT FLUSH` or a fail-over). Scripts read only
//! `KEYS` and `ARGV`: user data is never spliced into Lua source.

use once_cell::sync::Lazy;
use redis::Script;

/// A script whose body may call `value_of(key)`: the key's string value, `false` when the key
/// is missing, and `''` (never a token) when the key holds another type; any other error of
/// the `GET` (an ACL refusal, say) aborts the script with that error. A plain `GET` raises
/// `WRONGTYPE` there, which aborts the whole script: one foreign value would fail every key
/// of a renewal batch, and a release would report a Redis error instead of `Lost`.
///
/// It may also call `mint()`: the next fencing token from the counter `KEYS[2]`, or 0 when
/// `KEYS[2]` is the lock key itself (`FencingCounter::Off`: no counter is touched).
fn with_value_of(body: &str) -> Script {
    const HELPERS: &str = "
local function value_of(key)
  local value = redis.pcall('GET', key)
  if type(value) == 'table' then
    if value.err and string.find(value.err, 'WRONGTYPE', 1, true) then return '' end
    error(value)
  end
  return value
end
local function mint()
  if KEYS[2] == KEYS[1] then return 0 end
  return redis.call('INCR', KEYS[2])
end";
    Script::new(&format!("{HELPERS}{body}"))
}

/// Acquire: `SET key token NX PX ttl`, and on success mint the fencing token in the same script.
///
/// - `KEYS[1]` lock key, `KEYS[2]` fencing counter key (the lock key again: no fencing)
/// - `ARGV[1]` token, `ARGV[2]` ttl in ms
///
/// Returns `{1, fencing_token}` (0 without fencing) when acquired, otherwise `{0, pttl_ms}` of the current holder
/// (`-1`: the key has no expiry).
pub(crate) static ACQUIRE: Lazy<Script> = Lazy::new(|| {
    with_value_of(
        r"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, mint()}
end
return {0, redis.call('PTTL', KEYS[1])}
",
    )
});

/// Acquire on a single node, fair and with hand-off: [`ACQUIRE`] that honours the waiter queue.
///
/// - `KEYS[1]` lock key, `KEYS[2]` fencing counter, `KEYS[3]` waiter queue (a list of tokens
///   in arrival order), `KEYS[4]` waiter entries (a hash: token → `expires_ms|ttl_ms|channel`)
/// - `ARGV[1]` token, `ARGV[2]` ttl in ms, `ARGV[3]` `1` to queue up when not acquired,
///   `ARGV[4]` how long a queue entry lives without a refresh, in ms, `ARGV[5]` the pub/sub
///   channel that wakes this waiter
///
/// With no queue, this is `SET NX PX` plus the fencing `INCR`. Otherwise, waiters whose entry
/// expired are dropped from the head of the queue (server clock, `TIME`), and the key is
/// acquired when it holds this token (a release handed it over), or when it is free and nobody
/// live is queued ahead. Returns `{1, fencing_token}` when acquired, otherwise
/// `{0, pttl_ms}` (`0`: the key is free but a waiter ahead has the turn).
pub(crate) static ACQUIRE_QUEUED: Lazy<Script> = Lazy::new(|| {
    with_value_of(
        r"
local queued = redis.call('EXISTS', KEYS[3]) == 1
if not queued and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, mint()}
end
local holder = value_of(KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if queued then
    redis.call('LREM', KEYS[3], 0, ARGV[1])
    redis.call('HDEL', KEYS[4], ARGV[1])
  end
  return {1, mint()}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local head = queued and redis.call('LINDEX', KEYS[3], 0)
while head do
  local entry = redis.call('HGET', KEYS[4], head)
  if entry and tonumber(string.match(entry, '^(%d+)')) > now then break end
  redis.call('LPOP', KEYS[3])
  redis.call('HDEL', KEYS[4], head)
  head = redis.call('LINDEX', KEYS[3], 0)
end
if not holder and (not head or head == ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  if head then
    redis.call('LPOP', KEYS[3])
    redis.call('HDEL', KEYS[4], ARGV[1])
  end
  return {1, mint()}
end
if ARGV[3] == '1' then
  if redis.call('HSET', KEYS[4], ARGV[1], (now + tonumber(ARGV[4])) .. '|' .. ARGV[2] .. '|' .. ARGV[5]) == 1 then
    redis.call('RPUSH', KEYS[3], ARGV[1])
  end
  redis.call('PEXPIRE', KEYS[3], ARGV[4])
  redis.call('PEXPIRE', KEYS[4], ARGV[4])
end
if holder then
  return {0, redis.call('PTTL', KEYS[1])}
end
return {0, 0}
",
    )
});

/// Acquire of several keys on one node in one call, the fast path of
/// [`LockManager::acquire_many`](crate::LockManager::acquire_many): all keys, or none.
///
/// - `KEYS[3i-2]` lock key `i`, `KEYS[3i-1]` its fencing counter (several keys may name the
///   same counter), `KEYS[3i]` its waiter queue (see [`ACQUIRE_QUEUED`])
/// - `ARGV[1]` ttl in ms, `ARGV[i+1]` the value of lock key `i`
///
/// When no lock key exists (of any type: `EXISTS` never raises `WRONGTYPE`) and no key has a
/// waiter queue (a queued waiter has the turn: the fair queue is never jumped), sets every key
/// with `PX` and mints one fencing token per key (an `INCR` of its counter, in key order; 0
/// without fencing, where the counter key is the lock key itself), and
/// returns `{1, token_1, .., token_n}`. Otherwise it changes nothing and returns `{0}`: the
/// caller falls back to acquiring the keys one by one.
pub(crate) static ACQUIRE_ALL: Lazy<Script> = Lazy::new(|| {
    Script::new(
        r"
local n = #KEYS / 3
for i = 1, n do
  if redis.call('EXISTS', KEYS[3 * i - 2], KEYS[3 * i]) > 0 then
    return {0}
  end
end
local reply = {1}
for i = 1, n do
  redis.call('SET', KEYS[3 * i - 2], ARGV[i + 1], 'PX', ARGV[1])
  if KEYS[3 * i - 1] == KEYS[3 * i - 2] then
    reply[i + 1] = 0
  else
    reply[i + 1] = redis.call('INCR', KEYS[3 * i - 1])
  end
end
return reply
",
    )
});

/// Release on a single node, with hand-off: compare-and-delete (just that when nobody is
/// queued), then give the lock straight to the first live waiter in the queue and wake it. Also takes this token out of the queue, so
/// the same script withdraws a waiter that gives up.
///
/// - `KEYS[1]` lock key, `KEYS[2]` waiter queue, `KEYS[3]` waiter entries (see
///   [`ACQUIRE_QUEUED`])
/// - `ARGV[1]` token, `ARGV[2]` the claim window in ms: a handed-over lock lives this long (at
///   most the waiter's TTL) until the woken waiter claims it with its full TTL, so a waiter that
///   died while queued holds the others up for at most this long
///
/// Returns 1 when the key held the token and was deleted, 0 when the key was missing, -1 when
/// it holds another value (another holder's token, or another type).
pub(crate) static RELEASE_HANDOFF: Lazy<Script> = Lazy::new(|| {
    with_value_of(
        r"
local holder = value_of(KEYS[1])
if redis.call('EXISTS', KEYS[2]) == 0 then
  if holder == ARGV[1] then
    return redis.call('DEL', KEYS[1])
  end
  return holder and -1 or 0
end
redis.call('LREM', KEYS[2], 0, ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
if holder ~= ARGV[1] then
  return holder and -1 or 0
end
redis.call('DEL', KEYS[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local head = redis.call('LPOP', KEYS[2])
while head do
  local entry = redis.call('HGET', KEYS[3], head)
  redis.call('HDEL', KEYS[3], head)
  if entry then
    local expires, ttl, channel = string.match(entry, '^(%d+)|(%d+)|(.*)$')
    if tonumber(expires) > now then
      redis.call('SET', KEYS[1], head, 'PX', math.min(tonumber(ARGV[2]), tonumber(ttl)))
      redis.call('PUBLISH', channel, head)
      return 1
    end
  end
  head = redis.call('LPOP', KEYS[2])
end
return 1
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
    with_value_of(
        r"
if value_of(KEYS[1]) == ARGV[1] then
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
    with_value_of(
        r"
local renewed = {}
for i = 1, #KEYS do
  if value_of(KEYS[i]) == ARGV[2 * i - 1] then
    renewed[i] = redis.call('PEXPIRE', KEYS[i], ARGV[2 * i])
  else
    renewed[i] = 0
  end
end
return renewed
",
    )
});

/// Redlock: raises a node's fencing counter to at least a token minted on another node.
///
/// - `KEYS[1]` fencing counter key; `ARGV[1]` the fencing token
///
/// Returns 1. Never lowers the counter.
pub(crate) static RAISE_COUNTER: Lazy<Script> = Lazy::new(|| {
    Script::new(
        r"
local current = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if current < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1])
end
return 1
",
    )
});

/// Loads every script into the node's script cache (`SCRIPT LOAD`), so that the first burst of
/// acquires does not each meet `NOSCRIPT` and load the script again.
pub(crate) async fn preload_on(conn: &mut redis::aio::ConnectionManager) -> redis::RedisResult<()> {
    for script in [&*ACQUIRE_QUEUED, &*ACQUIRE_ALL, &*RELEASE_HANDOFF, &*RENEW] {
        script.load_async(conn).await?;
    }
    Ok(())
}

/// The commands each script runs, for an ACL refusal inside it: Redis reports only "the user
/// executing the script can't run this command", without naming the command.
fn commands_of(script: &Script) -> &'static str {
    let hash = script.get_hash();
    let table: [(&Lazy<Script>, &'static str); 7] = [
        (&ACQUIRE, "SET, INCR, PTTL"),
        (
            &ACQUIRE_QUEUED,
            "EXISTS, SET, INCR, GET, PEXPIRE, PTTL, TIME, LINDEX, LPOP, LREM, RPUSH, HGET, HSET, HDEL",
        ),
        (&ACQUIRE_ALL, "EXISTS, SET, INCR"),
        (
            &RELEASE_HANDOFF,
            "GET, EXISTS, DEL, SET, TIME, LPOP, LREM, HGET, HDEL, PUBLISH",
        ),
        (&RELEASE, "GET, DEL"),
        (&RENEW, "GET, PEXPIRE"),
        (&RAISE_COUNTER, "GET, SET"),
    ];
    table
        .iter()
        .find(|(known, _)| known.get_hash() == hash)
        .map_or("", |(_, commands)| commands)
}

/// `error` from invoking `script`, with the script's commands named when the ACL refused one
/// of them (see the README's ACL rule).
pub(crate) fn explain(script: &Script, error: redis::RedisError) -> redis::RedisError {
    let text = error.to_string();
    // Redis 7.0: "... can't run this command ..."; Valkey 8: "ACL failure in script: user .. has
    // no permissions to run the '..' command".
    if !text.contains("can't run this command") && !text.contains("no permissions to run") {
        return error;
    }
    redis::RedisError::from((
        redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm),
        "NOPERM: the ACL user may not run a command of a lockcore script",
        format!(
            "the script runs {}; grant them as in lockcore's README (\"ACL\"). Redis said: {text}",
            commands_of(script)
        ),
    ))
}
