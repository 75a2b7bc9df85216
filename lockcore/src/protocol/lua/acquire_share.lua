-- Acquire a share on a single node, fair and with hand-off: a semaphore's permit or a read-write
-- lock's read share (see shares.lua), in the fair queue of the lock key that plain locks use.
--
-- KEYS[1] lock key, KEYS[2] fencing counter, KEYS[3] waiter queue, KEYS[4] waiter entries,
-- KEYS[5] share set
-- ARGV[1] lock value, its kind at the end of its metadata (',"permits":<n>}' or
-- ',"mode":"read"}'), ARGV[2] ttl in ms, ARGV[3] the ticket, as for acquire_queued.lua:
--   1, a first attempt: takes a share when the lock is free (and its share set keeps no live
--      share whose marker is gone, see shares.lua) or holds shares of this kind with room, and
--      no live waiter is queued (first the live waiters at the head are served as far as they
--      fit, see hand_over.lua); otherwise queues at the back. A reader that arrives after a
--      queued writer therefore waits behind it.
--   2, a queued waiter's re-check: acquired when it holds a live share under its marker (a
--      grant whose wake-up was missed); otherwise the waiters ahead are served, then this one
--      when its turn comes and it fits; otherwise its entry is refreshed.
--   0, one attempt that never queues: as 1, but answers instead of queueing.
-- Reply: {1, fencing_token} when acquired with the value as sent; {1, fencing_token,
-- stored_value} when acquired by a re-check; {0, ms} when not, ms the time until the holder's
-- lease ends (a plain holder's PTTL, or the first share's end; 0 when a waiter has the turn);
-- {-1, type} when the lock key holds another type than a string; {-2, kind} when the lock key
-- holds shares of another kind (another number of permits, or readers), also when the waiters
-- this call served took it: the caller is never queued then, and a re-check leaves the queue.
--
-- Cost: O(log N) in the N shares held (ZREMRANGEBYSCORE drops only the shares whose lease
-- ended), plus the queue entries passed.
--
-- The first attempt's free-key fast path runs before any helper is defined: with no share set
-- (EXISTS), the marker by SET NX PX, the share, the fencing INCR. A release keeps the key set
-- while anyone is queued (it hands over instead), so a free key with live waiters only follows
-- an expired lease, as for acquire_queued.lua.
if string.byte(ARGV[3]) == 49 then
  local n = string.match(ARGV[1], ',"permits":(%d+)}$')
  local kind = n and ('"permits":' .. n)
  if not n and string.sub(ARGV[1], -15) == ',"mode":"read"}' then kind = '"mode":"read"' end
  if kind and (not n or tonumber(n) >= 1) and redis.call('EXISTS', KEYS[5]) == 0
    and redis.call('SET', KEYS[1], '@SHARES_MARKER@ {' .. kind .. '}', 'NX', 'PX', ARGV[2]) then
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    redis.call('ZADD', KEYS[5], now + tonumber(ARGV[2]), string.match(ARGV[1], '^[^ ]*'))
    redis.call('PEXPIRE', KEYS[5], ARGV[2])
    if KEYS[2] == KEYS[1] then return {1, 0} end
    local c = redis.call('INCR', KEYS[2])
    if c >= 9007199254740992 then c = redis.call('GET', KEYS[2]) end
    return {1, c}
  end
end
-- @include value_of
-- @include fencing
-- @include not_a_lock
-- @include queue
-- @include entries
-- @include shares
-- @include hand_over
-- @include enqueue
local mode, seq, claim, lease, channel = string.match(ARGV[3], '^(%d) (%d+) (%d+) (%d+) (.*)$')
if not mode then return redis.error_reply('ERR malformed lockcore acquire ticket') end
local cap, kind = share_of(ARGV[1])
if not cap or cap < 1 then return redis.error_reply('ERR lockcore share value without its kind') end
local token = token_of(ARGV[1])
local holder = redis.pcall('GET', KEYS[1])
if type(holder) == 'table' then return not_a_lock(holder) end
local held = held_kind(holder)
if held and held ~= kind then return refuse(mode, held) end
local now = now_ms()
local function take(stored)
  add_share(KEYS[1], KEYS[5], token, ARGV[2], now, kind)
  if stored then return {1, mint(KEYS[2]), stored} end
  return {1, mint(KEYS[2])}
end
if mode == '2' then
  local score = redis.call('ZSCORE', KEYS[5], token)
  if score and held and tonumber(score) > now then return take(stamp(ARGV[1], now)) end
  -- A grant whose marker is gone since: lost before this waiter knew of it.
  if score and not held then redis.call('ZREM', KEYS[5], token) end
end
local served, blocked = serve(now, token)
if served == 'self' then
  queue('LPOP', KEYS[3])
  queue('HDEL', KEYS[4], token)
  return take(stamp(ARGV[1], now))
end
-- The waiters served may have taken the key for another kind.
holder = redis.call('GET', KEYS[1])
held = held_kind(holder)
if held and held ~= kind then return refuse(mode, held) end
if not blocked then
  local room
  if held then room = live_shares(now) < cap
  else room = not holder and live_shares(now) == 0 end
  if room then
    if mode ~= '2' then return take(false) end
    queue('HDEL', KEYS[4], token)
    queue('LREM', KEYS[3], 0, ARGV[1])
    return take(stamp(ARGV[1], now))
  end
end
local wait
if holder and not held then wait = redis.call('PTTL', KEYS[1])
else wait = first_end(now) end
if mode ~= '0' then enqueue(mode, seq, claim, lease, channel, now) end
return {0, wait}
