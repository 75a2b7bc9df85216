//! The Lua scripts, kept in process-wide `redis::Script` statics.
//!
//! Each script is hashed once; [`Call`] sends `EVALSHA`, and on `NOSCRIPT` (for example after
//! `SCRIPT FLUSH` or a fail-over) loads the script ([`load`], which checks the server's reply)
//! and sends it again. Scripts read user
//! data only from `KEYS` and `ARGV`; only lockcore's own constants (the hand-off's entry lease
//! and claim window) are written into the Lua source.

use once_cell::sync::Lazy;
use redis::Script;

pub(crate) use crate::lua::{load, lua};

use crate::handoff;
use crate::options::duration_ms;

/// A script whose body may call `value_of(key)`: the key's string value, `false` when the key
/// is missing, and `''` (never a token) when the key holds another type; any other error of
/// the `GET` (an ACL refusal, say) aborts the script with that error. A plain `GET` raises
/// `WRONGTYPE` there, which aborts the whole script: one foreign value would fail every key
/// of a renewal batch, and a release would report a Redis error instead of `Lost`.
///
/// It may also call `mint()`: the next fencing token from the counter `KEYS[2]`, or 0 when
/// `KEYS[2]` is the lock key itself (`FencingCounter::Off`: no counter is touched).
fn with_value_of(body: &str) -> Script {
    lua(&format!("{VALUE_OF}{body}"))
}

/// The helpers of [`with_value_of`].
const VALUE_OF: &str = "
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

/// The fair hand-off queue's Lua helpers, for [`ACQUIRE_QUEUED`] and [`RELEASE_HANDOFF`].
///
/// The queue of a lock key is a list of waiters' lock values in arrival order; each waiter
/// also has a *waiter key*, `<waiter prefix><token>` (the token is the value up to its first
/// space), that lives while the waiter refreshes it (`PX` entry lease) and holds
/// `ttl_ms|seq|channel_len|channel<counter key>`: what a release needs to hand the lock over
/// without a round trip to the waiter. A queued value whose waiter key is gone (it withdrew
/// or died) is skipped. The waiter keys share the lock key's hash tag, so every key a script
/// touches is in one cluster slot.
///
/// `hand_over(key, queue, prefix, claim_ms, self, head, base)` gives the free `key` to the first
/// live waiter, starting with `head` (just popped from the queue): it pops the queue until a
/// waiter key exists, deletes that waiter key, and (unless
/// that waiter is `self`: then it returns `true` and the caller takes the key) sets `key` to
/// the waiter's value with `PX min(claim_ms, ttl)`, mints its fencing token with the waiter's
/// own counter, and publishes `<token> <fencing token> <seq>` on its channel. A refused
/// `PUBLISH` (an ACL without the channel) is ignored: the grant stands, and the waiter finds
/// the key holding its value at its next re-check. Returns the value granted, `true`, or
/// `false` when no live waiter is queued.
///
/// `base` is the manager's key prefix. A waiter entry is granted only when it names a counter
/// that is the lock key itself or starts with `<base>__fencing_counter__`, a channel under
/// `base`, and a TTL above 0; any other entry (written by something else, or malformed) is
/// skipped like a dead waiter, so that no script ever touches a key outside the prefix and
/// the lock key's slot, whatever an entry holds.
const QUEUE_HELPERS: &str = "
local function mint_on(counter, key)
  if counter == key then return 0 end
  return redis.call('INCR', counter)
end
local function grantable(key, base, ttl, channel, counter)
  local counters = base .. '__fencing_counter__'
  return tonumber(ttl) > 0
    and string.sub(channel, 1, #base) == base
    and (counter == key or string.sub(counter, 1, #counters) == counters)
end
local function waiter_key(prefix, value)
  return prefix .. string.match(value, '^[^ ]*')
end
local function entry_of(ttl, seq, channel, counter)
  return ttl .. '|' .. seq .. '|' .. #channel .. '|' .. channel .. counter
end
local function hand_over(key, queue, prefix, claim, self, head, base)
  while head do
    local entry = redis.call('GETDEL', waiter_key(prefix, head))
    if entry then
      if head == self then return true end
      local ttl, seq, len, rest = string.match(entry, '^(%d+)|(%d+)|(%d+)|(.*)$')
      if ttl then
        len = tonumber(len)
        local channel, counter = string.sub(rest, 1, len), string.sub(rest, len + 1)
        if grantable(key, base, ttl, channel, counter) then
          local fencing = mint_on(counter, key)
          redis.call('SET', key, head, 'PX', math.min(claim, tonumber(ttl)))
          redis.pcall('PUBLISH', channel, string.match(head, '^[^ ]*') .. ' ' .. fencing .. ' ' .. seq)
          return head
        end
      end
    end
    head = redis.call('LPOP', queue)
  end
  return false
end";

/// Acquire on a single node, fair and with hand-off: [`ACQUIRE`] that honours the waiter queue
/// (see [`QUEUE_HELPERS`] for its layout).
///
/// - `KEYS[1]` lock key, `KEYS[2]` fencing counter (the lock key again: no fencing),
///   `KEYS[3]` waiter queue (`<prefix>__waitq__{tag}<name>`)
/// - `ARGV[1]` lock value, `ARGV[2]` ttl in ms, `ARGV[3]` the ticket
///   `<mode> <seq> <prefix length> <channel>`: the mode (below), this attempt's sequence number
///   (echoed by a hand-over), the length of the manager's key prefix (the waiter key prefix
///   `<prefix>__waiters__{tag}<name>:` is derived from the queue's name with it), and the
///   pub/sub channel that wakes this waiter
///
/// Few arguments keep the free-key path cheap: Redis copies each one into the script.
///
/// A waiter key lives [`ENTRY_LEASE`](handoff::ENTRY_LEASE) without a refresh; a lock handed
/// to another waiter, [`CLAIM_WINDOW`](handoff::CLAIM_WINDOW) (see [`RELEASE_HANDOFF`]).
///
/// Modes:
/// - `1`, the first attempt of a waiting acquire: `SET NX PX GET`, plus the fencing `INCR`
///   when it set the key: a free key pays for no queue check. The release keeps the key set
///   while anyone is queued (it hands over instead of deleting), so a free key with live
///   waiters only follows an expired lease; a newcomer may then take it once, ahead of them.
///   When held: queue up (waiter key, `RPUSH`, queue `PEXPIRE`) and read the holder's `PTTL`,
///   so that a waiter wakes when a holder that died would have released.
/// - `2`, a queued waiter's re-check: acquired when the key holds this value (a hand-over
///   whose wake-up was missed); when the key is free, the first live waiter has the turn (this
///   one: acquired; another: handed over to it); otherwise refresh the waiter key (queue up
///   again, at the back, if it is gone: the waiter was presumed dead).
/// - `0`, one attempt that never queues: a free key is taken only when no live waiter is
///   queued (dead heads are dropped).
///
/// Returns `{1, fencing_token}` when acquired, otherwise `{0, pttl_ms}` (`0` when the key is
/// free but a waiter has the turn).
pub(crate) static ACQUIRE_QUEUED: Lazy<Script> = Lazy::new(|| {
    let lease_ms = duration_ms(handoff::ENTRY_LEASE);
    let claim_ms = duration_ms(handoff::CLAIM_WINDOW);
    let (queue_name, waiters_name) = (handoff::QUEUE_NAME, handoff::ENTRIES_NAME);
    let after_queue_name = queue_name.len() + 1;
    // The free-key fast path runs before any helper is defined: defining them costs each call.
    lua(&format!(
        r"
local old
if string.byte(ARGV[3]) == 49 then
  old = redis.pcall('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2], 'GET')
  if not old then
    if KEYS[2] == KEYS[1] then return {{1, 0}} end
    return {{1, redis.call('INCR', KEYS[2])}}
  end
end
{VALUE_OF}{QUEUE_HELPERS}
local mode, seq, plen, channel = string.match(ARGV[3], '^(%d) (%d+) (%d+) (.*)$')
plen = tonumber(plen)
local prefix = string.sub(KEYS[3], 1, plen) .. '{waiters_name}' .. string.sub(KEYS[3], plen + {after_queue_name}) .. ':'
local me = waiter_key(prefix, ARGV[1])
local function entry() return entry_of(ARGV[2], seq, channel, KEYS[2]) end
if mode == '1' then
  if type(old) == 'table' then
    if not (old.err and string.find(old.err, 'WRONGTYPE', 1, true)) then error(old) end
    old = ''
  end
  if old == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {{1, mint()}}
  end
  redis.call('SET', me, entry(), 'PX', {lease_ms})
  redis.call('RPUSH', KEYS[3], ARGV[1])
  redis.call('PEXPIRE', KEYS[3], {lease_ms})
  return {{0, redis.call('PTTL', KEYS[1])}}
end
local holder = value_of(KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {{1, mint()}}
end
if not holder then
  if mode == '0' then
    local head = redis.call('LINDEX', KEYS[3], 0)
    while head and redis.call('EXISTS', waiter_key(prefix, head)) == 0 do
      redis.call('LPOP', KEYS[3])
      head = redis.call('LINDEX', KEYS[3], 0)
    end
    if head then return {{0, 0}} end
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    return {{1, mint()}}
  end
  local given = hand_over(KEYS[1], KEYS[3], prefix, {claim_ms}, ARGV[1], redis.call('LPOP', KEYS[3]), string.sub(KEYS[3], 1, plen))
  if not given then redis.call('DEL', me) end
  if given == true or not given then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    return {{1, mint()}}
  end
end
if mode == '2' then
  if not redis.call('SET', me, entry(), 'XX', 'PX', {lease_ms}) then
    redis.call('SET', me, entry(), 'PX', {lease_ms})
    redis.call('LREM', KEYS[3], 0, ARGV[1])
    redis.call('RPUSH', KEYS[3], ARGV[1])
  end
  redis.call('PEXPIRE', KEYS[3], {lease_ms})
  if not holder then return {{0, 0}} end
end
return {{0, redis.call('PTTL', KEYS[1])}}
"
    ))
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
    lua(r"
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
")
});

/// Release on a single node, with direct grant: compare-and-delete, except that when a live
/// waiter is queued the key is handed to it instead (see [`QUEUE_HELPERS`]): its lease, its
/// fencing token and its wake-up come from this one call. A value that does not hold the key
/// (a waiter that gives up) withdraws from the queue instead.
///
/// - `KEYS[1]` lock key, `KEYS[2]` waiter queue
/// - `ARGV[1]` lock value, `ARGV[2]` the waiter key prefix
///
/// A handed-over lock lives [`CLAIM_WINDOW`](handoff::CLAIM_WINDOW) (at most the waiter's TTL)
/// until its new holder's first renewal sets the full TTL, so a waiter that died while queued
/// holds the others up for at most this long.
///
/// With nobody queued this is `GET`, `LPOP` (nothing) and `DEL`. Returns 1 when the key held the value (and was deleted or handed over), 0 when the key was
/// missing, -1 when it holds another value (another holder's token, or another type).
pub(crate) static RELEASE_HANDOFF: Lazy<Script> = Lazy::new(|| {
    let claim_ms = duration_ms(handoff::CLAIM_WINDOW);
    // The manager's prefix is what comes before the waiter key prefix's reserved name (a
    // prefix never holds one).
    let waiters_name = handoff::ENTRIES_NAME;
    // The no-waiter fast path runs before any helper is defined.
    lua(&format!(
        r"
local holder = redis.pcall('GET', KEYS[1])
if holder == ARGV[1] then
  local head = redis.call('LPOP', KEYS[2])
  if not head then return redis.call('DEL', KEYS[1]) end
{QUEUE_HELPERS}
  local base = string.sub(ARGV[2], 1, (string.find(ARGV[2], '{waiters_name}', 1, true) or 1) - 1)
  if not hand_over(KEYS[1], KEYS[2], ARGV[2], {claim_ms}, false, head, base) then
    redis.call('DEL', KEYS[1])
  end
  return 1
end
if type(holder) == 'table' then
  if not (holder.err and string.find(holder.err, 'WRONGTYPE', 1, true)) then error(holder) end
  holder = ''
end
redis.call('DEL', ARGV[2] .. string.match(ARGV[1], '^[^ ]*'))
redis.call('LREM', KEYS[2], 0, ARGV[1])
return holder and -1 or 0
"
    ))
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
    lua(r"
local current = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if current < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1])
end
return 1
")
});

/// One `EVALSHA` of a script, written straight into one command buffer of the right size
/// (redis-rs' `ScriptInvocation` allocates a buffer per key and argument, then copies them
/// all into the command). Like `ScriptInvocation::invoke_async`, it loads the script and
/// sends the command again after a `NOSCRIPT` reply.
pub(crate) struct Call<'s> {
    script: &'s Script,
    cmd: redis::Cmd,
}

impl<'s> Call<'s> {
    /// A call with `keys` keys, about `args` keys and arguments in all, of about `bytes` bytes.
    pub(crate) fn new(script: &'s Script, keys: usize, args: usize, bytes: usize) -> Self {
        let mut cmd = redis::Cmd::with_capacity(3 + args, 64 + bytes);
        cmd.arg("EVALSHA").arg(script.get_hash()).arg(keys);
        Call { script, cmd }
    }

    /// Appends a key or an argument, in order: the keys first.
    pub(crate) fn arg(&mut self, arg: impl redis::ToRedisArgs) -> &mut Self {
        self.cmd.arg(arg);
        self
    }

    /// Sends the call; errors are [`explain`]ed.
    pub(crate) async fn invoke<T: redis::FromRedisValue>(
        &self,
        conn: &mut impl redis::aio::ConnectionLike,
    ) -> redis::RedisResult<T> {
        self.send(conn).await.map_err(|e| explain(self.script, e))
    }

    /// Sends the call, and again after loading the script when the server answers `NOSCRIPT`.
    pub(crate) async fn send<T: redis::FromRedisValue>(
        &self,
        conn: &mut impl redis::aio::ConnectionLike,
    ) -> redis::RedisResult<T> {
        match self.cmd.query_async(conn).await {
            Err(err)
                if err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
            {
                load(self.script, conn).await?;
                self.cmd.query_async(conn).await
            }
            other => other,
        }
    }
}

/// Loads every script into the node's script cache (`SCRIPT LOAD`), so that the first burst of
/// acquires does not each meet `NOSCRIPT` and load the script again.
pub(crate) async fn preload_on(
    conn: &mut impl redis::aio::ConnectionLike,
) -> redis::RedisResult<()> {
    for script in [&*ACQUIRE_QUEUED, &*ACQUIRE_ALL, &*RELEASE_HANDOFF, &*RENEW] {
        load(script, conn).await?;
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
            "SET, GET, GETDEL, INCR, PEXPIRE, PTTL, EXISTS, DEL, LINDEX, LPOP, LREM, RPUSH, PUBLISH",
        ),
        (&ACQUIRE_ALL, "EXISTS, SET, INCR"),
        (
            &RELEASE_HANDOFF,
            "GET, DEL, LREM, LPOP, GETDEL, SET, INCR, PUBLISH",
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
    if text.contains("can't publish to the channel") || text.contains("no permissions to access") {
        return redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm),
            "NOPERM: the ACL user may not use a lockcore key or channel",
            format!(
                "every key and channel lockcore uses is under the manager's prefix: grant `~<prefix>*` and `&<prefix>*` as in lockcore's README (\"ACL\"). Redis said: {text}"
            ),
        ));
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The Lua text names the fencing counters as the Rust side does.
    #[test]
    fn the_helpers_know_the_counter_name() {
        let quoted = format!("'{}'", crate::fencing::COUNTER_NAME);
        assert!(QUEUE_HELPERS.contains(&quoted), "{QUEUE_HELPERS}");
    }
}
