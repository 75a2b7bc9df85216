//! The Lua scripts, kept in process-wide [`Lua`] statics.
//!
//! Each script is hashed once; [`Call`] sends `EVALSHA` and, on `NOSCRIPT` (for example after
//! `SCRIPT FLUSH` or a fail-over), loads the script on the node that refused it and sends the
//! call again. Scripts read user data only from `KEYS` and `ARGV`, and touch only the keys in
//! `KEYS`; only lockcore's own constants are written into the Lua source.

use once_cell::sync::Lazy;
use redis::Script;

use crate::node::Node;

/// A script whose body may call `value_of(key)`: the key's string value, `false` when the key
/// is missing, and `''` (never a token) when the key holds another type; any other error of
/// the `GET` (an ACL refusal, say) aborts the script with that error. A plain `GET` raises
/// `WRONGTYPE` there, which aborts the whole script: one foreign value would fail every key
/// of a renewal batch, and a release would report a Redis error instead of `Lost`.
///
/// It may also call `owns(value, token)`: whether the lock value `value` is the one of the
/// holder whose token is `token` (the value's first word; a value may carry holder metadata
/// after its token, which a hand-over stamps), and `token_of(value)`.
fn with_value_of(body: &str) -> Lua {
    Lua::new(format!("{VALUE_OF}{body}"))
}

/// A Lua script: its source, for a `SCRIPT LOAD` on one node, and its redis-rs handle (the
/// SHA1 that `EVALSHA` sends), which it dereferences to.
pub(crate) struct Lua {
    code: String,
    script: Script,
}

impl Lua {
    /// The script of `code`.
    pub(crate) fn new(code: impl Into<String>) -> Self {
        let code = code.into();
        Lua {
            script: Script::new(&code),
            code,
        }
    }

    /// `SCRIPT LOAD` of this script.
    fn load_cmd(&self) -> redis::Cmd {
        let mut cmd = redis::cmd("SCRIPT");
        cmd.arg("LOAD").arg(&self.code);
        cmd
    }

    /// `SCRIPT LOAD` of this script on `conn`.
    async fn load_on(&self, conn: &mut impl redis::aio::ConnectionLike) -> redis::RedisResult<()> {
        let reply: redis::Value = self.load_cmd().query_async(conn).await?;
        self.check_loaded(&reply)
    }

    /// A `SCRIPT LOAD` reply other than this script's SHA1 is an error. redis-rs' own loader
    /// (`Script::load_async`, and `invoke_async` after `NOSCRIPT`) asserts it instead, which
    /// panics a debug build on a server's reply.
    fn check_loaded(&self, reply: &redis::Value) -> redis::RedisResult<()> {
        let hash: &[u8] = match reply {
            redis::Value::BulkString(hash) => hash,
            redis::Value::SimpleString(hash) => hash.as_bytes(),
            _ => &[],
        };
        if hash == self.get_hash().as_bytes() {
            return Ok(());
        }
        Err(redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "the server answered `SCRIPT LOAD` with another value than the script's SHA1",
            format!("expected {}, got {reply:?}", self.get_hash()),
        )))
    }
}

impl std::ops::Deref for Lua {
    type Target = Script;

    fn deref(&self) -> &Script {
        &self.script
    }
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
local function token_of(value)
  return string.match(value, '^[^ ]*')
end
local function owns(value, token)
  return value and string.sub(value, 1, #token) == token
    and (#value == #token or string.byte(value, #token + 1) == 32)
end";

/// The fencing helpers: `mint(counter)` increments the fencing counter `counter` and returns
/// the new token, or 0 when `counter` is `KEYS[1]`, the lock key itself (`FencingCounter::Off`:
/// no counter is touched); `decimal(n)` writes a token in decimal.
///
/// A Lua number is a double, exact only up to 2^53: above that `INCR`'s reply is rounded, so
/// `mint` then reads the counter back as a string, and returns that (a bulk reply, which the
/// client parses as an integer). Every token stays exact over the whole range of the counter,
/// up to `i64::MAX`.
const FENCING: &str = "
local function mint(counter)
  if counter == KEYS[1] then return 0 end
  local n = redis.call('INCR', counter)
  if n >= 9007199254740992 then return redis.call('GET', counter) end
  return n
end
local function decimal(n)
  if type(n) == 'number' then return string.format('%d', n) end
  return n
end";

/// The reply `{-1, <type>}` for a lock key that holds another type than a string (a list, a
/// hash, ...), from the error `reply` of a `GET` on it; any other error aborts the script.
/// No lock holder ever writes such a key: it is a client's mistake, reported at once as
/// `LockError::NotALock` rather than as a lock somebody holds.
const NOT_A_LOCK: &str = "
local function not_a_lock(reply)
  if not (reply.err and string.find(reply.err, 'WRONGTYPE', 1, true)) then error(reply) end
  return {-1, redis.call('TYPE', KEYS[1])['ok']}
end";

/// Acquire (Redlock, on each node): `SET key token NX PX ttl`, and on success mint the fencing
/// token in the same script.
///
/// - `KEYS[1]` lock key, `KEYS[2]` fencing counter key (the lock key again: no fencing)
/// - `ARGV[1]` lock value, `ARGV[2]` ttl in ms
///
/// Returns `{1, fencing_token}` (0 without fencing) when acquired, `{0, pttl_ms}` of the
/// current holder otherwise (`-1`: the key has no expiry), `{-1, type}` when the key holds
/// another type than a string.
pub(crate) static ACQUIRE: Lazy<Lua> = Lazy::new(|| {
    Lua::new(format!(
        r"{FENCING}{NOT_A_LOCK}
local old = redis.pcall('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2], 'GET')
if not old then return {{1, mint(KEYS[2])}} end
if type(old) == 'table' then return not_a_lock(old) end
return {{0, redis.call('PTTL', KEYS[1])}}
"
    ))
});

/// The fair hand-off queue's Lua helpers, for [`ACQUIRE_QUEUED`] and [`RELEASE_HANDOFF`], whose
/// keys are both `KEYS[1]` lock key, `KEYS[2]` the caller's fencing counter (the lock key
/// itself without fencing), `KEYS[3]` the waiter queue, `KEYS[4]` the waiter entries. Every key
/// a script touches is one of these four (they share the lock key's cluster slot), so a script
/// whose keys are split by a slot migration fails before it writes (`TRYAGAIN`).
///
/// The queue is a list of waiters' lock values in arrival order. The entries are a hash, one
/// field per queued waiter's token:
/// `<deadline_ms>|<ttl_ms>|<seq>|<claim_ms>|<counter length>|<counter key><channel>`, where the
/// deadline (Redis' clock, `TIME`) is how long the waiter counts as live without a re-check,
/// `seq` the sequence number of its latest attempt (echoed by a hand-over), `claim_ms` how long
/// a lock handed to it lives until its first renewal, and the counter and channel those of the
/// waiter's manager. A queued value whose entry is gone or past its deadline is skipped. The
/// two keys expire together, [`QUEUE_TTL_FLOOR_MS`] (or 4 entry leases) after the last change.
///
/// `hand_over(head, self, now)` gives the free lock key to the first live waiter, starting with
/// `head` (just popped from the queue): it pops the queue until an entry is live, deletes the
/// entries it passes, and (unless that waiter is `self`, a token: then it returns `true` and
/// the caller takes the key) sets the lock key to the waiter's value, its `acquired_at` stamped
/// with the time of the grant, with `PX min(claim_ms, ttl_ms)`, mints its fencing token with
/// the caller's counter (the waiter's counter must be `KEYS[2]` or, without fencing, the lock
/// key: no other key is ever touched) and publishes `<token> <fencing token> <seq> <stored
/// value>` on its channel. A waiter whose counter is another key is put back at the head and
/// woken with `<token> 0 0` to take the key itself (`'recheck'`). A refused `PUBLISH` (an ACL
/// without the channel) is ignored: the grant stands, and the waiter finds the key holding its
/// value at its next re-check. Returns the value granted, `true`, `'recheck'`, or `false` when
/// no live waiter is queued. At most [`HAND_OVER_STEPS`] entries are passed per call.
///
/// A queue key of another type (not written by lockcore) is deleted and counts as empty.
const QUEUE_HELPERS: &str = "
local function queue(command, key, ...)
  local reply = redis.pcall(command, key, ...)
  if type(reply) == 'table' and reply.err then
    if not string.find(reply.err, 'WRONGTYPE', 1, true) then error(reply) end
    redis.call('DEL', KEYS[3], KEYS[4])
    return false
  end
  return reply
end
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function stamp(value, now)
  return (string.gsub(value, ',\"acquired_at\":%d+', ',\"acquired_at\":' .. string.format('%d', now), 1))
end
local function entry_fields(entry)
  return string.match(entry, '^(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|(.*)$')
end
local function hand_over(head, self, now)
  for _ = 1, HAND_OVER_STEPS do
    if not head then return false end
    local token = token_of(head)
    local entry = queue('HGET', KEYS[4], token)
    if entry then
      queue('HDEL', KEYS[4], token)
      local deadline, ttl, seq, claim, len, rest = entry_fields(entry)
      local px = ttl and math.min(tonumber(claim), tonumber(ttl))
      if px and px >= 1 and px <= MAX_TTL_MS and tonumber(deadline) > now then
        if token == self then return true end
        len = tonumber(len)
        local counter, channel = string.sub(rest, 1, len), string.sub(rest, len + 1)
        if counter ~= KEYS[1] and counter ~= KEYS[2] then
          queue('LPUSH', KEYS[3], head)
          queue('HSET', KEYS[4], token, entry)
          redis.pcall('PUBLISH', channel, token .. ' 0 0')
          return 'recheck'
        end
        local fencing = decimal(mint(counter))
        local stored = stamp(head, now)
        redis.call('SET', KEYS[1], stored, 'PX', px)
        redis.pcall('PUBLISH', channel, token .. ' ' .. fencing .. ' ' .. seq .. ' ' .. stored)
        return head
      end
    end
    head = queue('LPOP', KEYS[3])
  end
  return false
end";

/// The most queue entries one script call passes over (dead waiters it drops) before it gives
/// up for this call; the next call goes on.
const HAND_OVER_STEPS: usize = 64;

/// The least TTL of the waiter queue and its entries after a change: they expire on their own
/// once no waiter refreshes them.
const QUEUE_TTL_FLOOR_MS: u64 = 10_000;

/// [`QUEUE_HELPERS`] with its constants.
fn queue_helpers() -> String {
    let max_ttl_ms = crate::options::duration_ms(crate::LockOptions::MAX_TTL);
    format!("{VALUE_OF}{FENCING}{NOT_A_LOCK}{QUEUE_HELPERS}")
        .replace("HAND_OVER_STEPS", &HAND_OVER_STEPS.to_string())
        .replace("MAX_TTL_MS", &max_ttl_ms.to_string())
}

/// Acquire on a single node, fair and with hand-off: [`ACQUIRE`] that honours the waiter queue
/// (see [`QUEUE_HELPERS`] for the keys and the layout).
///
/// - `KEYS` as for [`QUEUE_HELPERS`]
/// - `ARGV[1]` lock value, `ARGV[2]` ttl in ms, `ARGV[3]` the ticket
///   `<mode> <seq> <claim_ms> <lease_ms> <channel>`: the mode (below), this attempt's sequence
///   number (echoed by a hand-over), the claim window of a lock handed to this waiter and how
///   long its entry lives without a re-check (both from the caller's round trip), and the
///   pub/sub channel that wakes this waiter
///
/// Modes:
/// - `1`, the first attempt of a waiting acquire: `SET NX PX GET`, plus the fencing `INCR`
///   when it set the key: a free key pays for no queue check. The release keeps the key set
///   while anyone is queued (it hands over instead of deleting), so a free key with live
///   waiters only follows an expired lease; a newcomer may then take it once, ahead of them.
///   When held: queue up (entry, `RPUSH`, the queue keys' `PEXPIRE`) and read the holder's
///   `PTTL`, so that a waiter wakes when a holder that died would have released.
/// - `2`, a queued waiter's re-check: acquired when the key holds this waiter's token (a
///   hand-over whose wake-up was missed); when the key is free, the first live waiter has the
///   turn (this one: acquired; another: handed over to it); otherwise refresh the entry (queue
///   up again, at the back, if it is gone or past its deadline: the waiter was presumed dead).
/// - `0`, one attempt that never queues: a free key is taken only when no live waiter is
///   queued (dead heads are dropped).
///
/// Returns `{1, fencing_token}` when acquired with the value as sent, `{1, fencing_token,
/// stored_value}` when acquired with a value Redis holds stamped (a re-check that took the key
/// or found its hand-over), `{0, pttl_ms}` when not (`0` when the key is free but a waiter has
/// the turn), `{-1, type}` when the lock key holds another type than a string.
pub(crate) static ACQUIRE_QUEUED: Lazy<Lua> = Lazy::new(|| {
    let helpers = queue_helpers();
    // The free-key fast path runs before any helper is defined: defining them costs each call.
    Lua::new(format!(
        r"
local old
if string.byte(ARGV[3]) == 49 then
  old = redis.pcall('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2], 'GET')
  if not old then
    if KEYS[2] == KEYS[1] then return {{1, 0}} end
    local n = redis.call('INCR', KEYS[2])
    if n >= 9007199254740992 then n = redis.call('GET', KEYS[2]) end
    return {{1, n}}
  end
end
{helpers}
local mode, seq, claim, lease, channel = string.match(ARGV[3], '^(%d) (%d+) (%d+) (%d+) (.*)$')
if not mode then return redis.error_reply('ERR malformed lockcore acquire ticket') end
local token = token_of(ARGV[1])
local holder = old
if mode ~= '1' then holder = redis.pcall('GET', KEYS[1]) end
if type(holder) == 'table' then return not_a_lock(holder) end
if owns(holder, token) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {{1, mint(KEYS[2]), holder}}
end
local now = now_ms()
if not holder then
  if mode == '0' then
    local head = queue('LINDEX', KEYS[3], 0)
    for _ = 1, {HAND_OVER_STEPS} do
      if not head then break end
      local entry = queue('HGET', KEYS[4], token_of(head))
      local deadline = entry and string.match(entry, '^(%d+)|')
      if deadline and tonumber(deadline) > now then return {{0, 0}} end
      queue('LPOP', KEYS[3])
      if entry then queue('HDEL', KEYS[4], token_of(head)) end
      head = queue('LINDEX', KEYS[3], 0)
    end
    if head then return {{0, 0}} end
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    return {{1, mint(KEYS[2])}}
  end
  local given = hand_over(queue('LPOP', KEYS[3]), token, now)
  if given == true or not given then
    queue('HDEL', KEYS[4], token)
    local stored = stamp(ARGV[1], now)
    redis.call('SET', KEYS[1], stored, 'PX', ARGV[2])
    return {{1, mint(KEYS[2]), stored}}
  end
end
if mode == '0' then return {{0, redis.call('PTTL', KEYS[1])}} end
local entry = decimal(now + tonumber(lease)) .. '|' .. ARGV[2] .. '|' .. seq .. '|' .. claim .. '|' .. #KEYS[2] .. '|' .. KEYS[2] .. channel
-- A re-check whose entry is gone or lapsed was presumed dead: it queues again, at the back.
local lapsed = true
if mode == '2' then
  local before = queue('HGET', KEYS[4], token)
  local deadline = before and string.match(before, '^(%d+)|')
  lapsed = not (deadline and tonumber(deadline) > now)
end
if queue('HSET', KEYS[4], token, entry) == false then queue('HSET', KEYS[4], token, entry) end
if lapsed then
  if mode == '2' then queue('LREM', KEYS[3], 0, ARGV[1]) end
  queue('RPUSH', KEYS[3], ARGV[1])
end
local keep = math.max({QUEUE_TTL_FLOOR_MS}, 4 * tonumber(lease))
redis.call('PEXPIRE', KEYS[3], keep)
redis.call('PEXPIRE', KEYS[4], keep)
if not holder then return {{0, 0}} end
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
/// with `PX` and mints one fencing token per key (an `INCR` of its counter, in key order, exact
/// over the counter's whole range; 0 without fencing, where the counter key is the lock key
/// itself), and returns `{1, token_1, .., token_n}`. Otherwise it changes nothing and returns
/// `{0}`: the caller falls back to acquiring the keys one by one.
pub(crate) static ACQUIRE_ALL: Lazy<Lua> = Lazy::new(|| {
    Lua::new(
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
  local counter = KEYS[3 * i - 1]
  if counter == KEYS[3 * i - 2] then
    reply[i + 1] = 0
  else
    local token = redis.call('INCR', counter)
    if token >= 9007199254740992 then token = redis.call('GET', counter) end
    reply[i + 1] = token
  end
end
return reply
",
    )
});

/// Release on a single node, with direct grant: compare-and-delete, except that when a live
/// waiter is queued the key is handed to it instead (see [`QUEUE_HELPERS`]): its lease, its
/// fencing token and its wake-up come from this one call. A value that does not hold the key
/// (a waiter that gives up) withdraws from the queue instead.
///
/// - `KEYS` as for [`QUEUE_HELPERS`]; `ARGV[1]` lock value (the holder is recognised by its
///   token, the value's first word: a hand-over stamps the rest)
///
/// A lock handed to a waiter lives its claim window (at most the waiter's TTL) until its new
/// holder's first renewal sets the full TTL, so a waiter that died while queued holds the
/// others up for at most that long.
///
/// With nobody queued this is `GET`, `LPOP` (nothing) and `DEL`. Returns 1 when the key held
/// the value (and was deleted or handed over), 0 when the key was missing, -1 when it holds
/// another value (another holder's token, or another type).
pub(crate) static RELEASE_HANDOFF: Lazy<Lua> = Lazy::new(|| {
    let helpers = queue_helpers();
    // The no-waiter fast path runs before any helper is defined.
    Lua::new(format!(
        r"
local holder = redis.pcall('GET', KEYS[1])
local token = string.match(ARGV[1], '^[^ ]*')
if type(holder) == 'string' and string.sub(holder, 1, #token) == token
  and (#holder == #token or string.byte(holder, #token + 1) == 32) then
  local head = redis.pcall('LPOP', KEYS[3])
  if not head then return redis.call('DEL', KEYS[1]) end
{helpers}
  if type(head) == 'table' then head = queue('LPOP', KEYS[3]) end
  local given = hand_over(head, false, now_ms())
  if not given or given == 'recheck' then redis.call('DEL', KEYS[1]) end
  return 1
end
{helpers}
if type(holder) == 'table' then
  if not (holder.err and string.find(holder.err, 'WRONGTYPE', 1, true)) then error(holder) end
  holder = ''
end
queue('HDEL', KEYS[4], token)
queue('LREM', KEYS[3], 0, ARGV[1])
return holder and -1 or 0
"
    ))
});

/// Release: compare-and-delete, as in the Redis `SET` documentation's lock pattern.
///
/// - `KEYS[1]` lock key; `ARGV[1]` the lock value (or its token, its first word)
///
/// Returns 1 when the key held the token and was deleted, 0 otherwise (expired, deleted, or
/// another holder's token): a stale holder never deletes another holder's key.
pub(crate) static RELEASE: Lazy<Lua> = Lazy::new(|| {
    with_value_of(
        r"
if owns(value_of(KEYS[1]), token_of(ARGV[1])) then
  return redis.call('DEL', KEYS[1])
end
return 0
",
    )
});

/// Extend and watchdog renewal: compare-and-`PEXPIRE` over one or more keys. Sets the TTL
/// (never adds to it) and never re-creates a missing key.
///
/// - `KEYS[i]` lock keys; `ARGV[2i-1]` the lock value (or its token) of `KEYS[i]`, `ARGV[2i]`
///   its new ttl in ms
///
/// Returns one entry per key: 1 when the key held the token and its TTL was set, 0 otherwise.
/// On Redis Cluster all keys of one call must share a slot (one key per call always does).
pub(crate) static RENEW: Lazy<Lua> = Lazy::new(|| {
    with_value_of(
        r"
local renewed = {}
for i = 1, #KEYS do
  if owns(value_of(KEYS[i]), token_of(ARGV[2 * i - 1])) then
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
/// - `KEYS[1]` fencing counter key; `ARGV[1]` the fencing token, in decimal
///
/// Returns 1. Never lowers the counter. The two are compared as decimal strings (the longer
/// is larger, then digit by digit), exact over the counter's whole range: a Lua number is a
/// double, which would round tokens above 2^53.
pub(crate) static RAISE_COUNTER: Lazy<Lua> = Lazy::new(|| {
    Lua::new(
        r"
local function below(a, b)
  if #a ~= #b then return #a < #b end
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return false
end
if below(redis.call('GET', KEYS[1]) or '0', ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1])
end
return 1
",
    )
});

/// One `EVALSHA` of a script, written straight into one command buffer of the right size
/// (redis-rs' `ScriptInvocation` allocates a buffer per key and argument, then copies them
/// all into the command). On a `NOSCRIPT` reply it loads the script on the node that serves the
/// call's first key, and only there, then sends the command again: redis-rs' `invoke_async`
/// sends that `SCRIPT LOAD` to every node of a cluster and so waits for the slowest shard.
pub(crate) struct Call<'s> {
    script: &'s Lua,
    cmd: redis::Cmd,
    keys: usize,
}

impl<'s> Call<'s> {
    /// A call with `keys` keys, about `args` keys and arguments in all, of about `bytes` bytes.
    pub(crate) fn new(script: &'s Lua, keys: usize, args: usize, bytes: usize) -> Self {
        let mut cmd = redis::Cmd::with_capacity(3 + args, 64 + bytes);
        cmd.arg("EVALSHA").arg(script.get_hash()).arg(keys);
        Call { script, cmd, keys }
    }

    /// Appends a key or an argument, in order: the keys first.
    pub(crate) fn arg(&mut self, arg: impl redis::ToRedisArgs) -> &mut Self {
        self.cmd.arg(arg);
        self
    }

    /// The script and its `EVALSHA` command, for a pipeline that sends more after it (the
    /// replicas' `WAIT`).
    pub(crate) fn parts(&self) -> (&'s Script, &redis::Cmd) {
        (self.script, &self.cmd)
    }

    /// Sends the call; errors are [`explain`]ed.
    pub(crate) async fn invoke<T: redis::FromRedisValue>(
        &self,
        node: &mut Node,
    ) -> redis::RedisResult<T> {
        let reply = match self.cmd.query_async(node).await {
            Err(err)
                if err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
            {
                match self.load(node).await {
                    Ok(()) => self.cmd.query_async(node).await,
                    Err(load) => Err(load),
                }
            }
            other => other,
        };
        reply.map_err(|e| explain(self.script, e))
    }

    /// `SCRIPT LOAD` on the node that serves the first key (every node without a key).
    pub(crate) async fn load(&self, node: &mut Node) -> redis::RedisResult<()> {
        // The command is `EVALSHA sha numkeys key..`: the first key is its fourth word.
        let first_key = (self.keys > 0)
            .then(|| self.cmd.args_iter().nth(3))
            .flatten()
            .and_then(|arg| match arg {
                redis::Arg::Simple(bytes) => Some(bytes.to_vec()),
                _ => None,
            });
        match first_key {
            Some(key) => {
                let reply: redis::Value = node.query_for_key(&key, self.script.load_cmd()).await?;
                self.script.check_loaded(&reply)
            }
            None => self.script.load_on(node).await,
        }
    }

    /// Sends the call on any connection (a resource's, not a lock node), and again after
    /// loading the script there when the server answers `NOSCRIPT`. Errors are not explained.
    pub(crate) async fn send<T: redis::FromRedisValue>(
        &self,
        conn: &mut impl redis::aio::ConnectionLike,
    ) -> redis::RedisResult<T> {
        match self.cmd.query_async(conn).await {
            Err(err)
                if err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
            {
                self.script.load_on(conn).await?;
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
        script.load_on(conn).await?;
    }
    Ok(())
}

/// The commands each script runs, for an ACL refusal inside it: Redis reports only "the user
/// executing the script can't run this command", without naming the command.
fn commands_of(script: &Script) -> &'static str {
    let hash = script.get_hash();
    let table: [(&Lazy<Lua>, &'static str); 7] = [
        (&ACQUIRE, "SET, GET, INCR, PTTL, TYPE"),
        (
            &ACQUIRE_QUEUED,
            "SET, GET, INCR, PEXPIRE, PTTL, TYPE, TIME, DEL, LINDEX, LPOP, LPUSH, LREM, RPUSH, HGET, HSET, HDEL, PUBLISH",
        ),
        (&ACQUIRE_ALL, "EXISTS, SET, INCR, GET"),
        (
            &RELEASE_HANDOFF,
            "GET, DEL, TIME, LPOP, LPUSH, LREM, HGET, HSET, HDEL, SET, INCR, PUBLISH",
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
/// of them (see the ACL rule in the guide, `docs/src/topologies.md`).
pub(crate) fn explain(script: &Script, error: redis::RedisError) -> redis::RedisError {
    let text = error.to_string();
    // Redis 7.0: "... can't run this command ..."; Valkey 8: "ACL failure in script: user .. has
    // no permissions to run the '..' command".
    if text.contains("can't publish to the channel") || text.contains("no permissions to access") {
        return redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm),
            "NOPERM: the ACL user may not use a lockcore key or channel",
            format!(
                "every key and channel lockcore uses is under the manager's prefix: grant `~<prefix>*` and `&<prefix>*` as in lockcore's guide (\"Topologies\", \"ACL\"). Redis said: {text}"
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
            "the script runs {}; grant them as in lockcore's guide (\"Topologies\", \"ACL\"). Redis said: {text}",
            commands_of(script)
        ),
    ))
}
