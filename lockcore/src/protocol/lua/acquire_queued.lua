-- Acquire on a single node, fair and with hand-off: acquire.lua that honours the waiter queue
-- (see hand_over.lua for the keys and the queue's layout).
--
-- KEYS[1] lock key, KEYS[2] fencing counter, KEYS[3] waiter queue, KEYS[4] waiter entries,
-- KEYS[5] (optional) the share set: with it, a waiter whose turn comes while the key is free is
-- served even when it waits for a share (see hand_over.lua); without it, such a waiter is woken
-- to take its turn itself. Readers' and a semaphore's shares leave a marker at the lock key
-- (see shares.lua): a plain lock finds the key held and queues behind them.
-- ARGV[1] lock value, ARGV[2] ttl in ms, ARGV[3] the ticket, ARGV[4] (optional) '1': the key is
-- set to the value with its acquired_at stamped with this server's time (TIME), which a
-- release's minimum hold is measured from (hold.lua); the reply then carries the stored value
--   '<mode> <seq> <claim_ms> <lease_ms> <channel>': the mode (below), this attempt's sequence
--   number (echoed by a grant), the claim window of a lock handed to this waiter and how long
--   its entry lives without a re-check (both from the caller's round trip), and the channel
--   that wakes this waiter
-- Modes:
--   1, the first attempt of a waiting acquire: SET NX PX GET, plus the fencing INCR when it set
--      the key: a free key pays for no queue check. A release keeps the key set while anyone
--      is queued (it hands over instead of deleting), so a free key with live waiters only
--      follows an expired lease; a newcomer may then take it once, ahead of them. When held:
--      queue up (entry, RPUSH, the queue keys' PEXPIRE) and read the holder's PTTL, so that a
--      waiter wakes when a holder that died would have released.
--   2, a queued waiter's re-check: acquired when the key holds this waiter's token (a grant
--      whose wake-up was missed); when the key is free, the first live waiter has the turn
--      (this one: acquired; others: handed over to them, see hand_over.lua); otherwise refresh
--      the entry (queue up again, at the back, if it is gone or past its deadline: the waiter
--      was presumed dead).
--   0, one attempt that never queues: a free key is taken only when no live waiter is queued
--      (dead heads are dropped). With no queue at all (the uncontended case) it takes the fast
--      path of mode 1: an EXISTS of the queue, then SET NX PX GET.
-- Reply: {1, fencing_token} when acquired with the value as sent; {1, fencing_token,
-- stored_value} when acquired with the value Redis holds stamped (a re-check that took the key
-- or found its grant); {0, pttl_ms} when not (0 when the key is free but a waiter has the
-- turn); {-1, type} when the lock key holds another type than a string; {-2, kind} when it
-- holds a semaphore's permits (the marker's kind, see shares.lua), also when the waiters this
-- call served took it: a plain lock is never granted a semaphore's key, so the caller is not
-- queued (a re-check leaves the queue). Readers' shares are waited for, as any holder.
--
-- The free-key fast path runs before any helper is defined: defining them costs each call.
local old
local value = ARGV[1]
if ARGV[4] == '1' then
  local t = redis.call('TIME')
  local now = string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
  value = (string.gsub(value, ',"acquired_at":%d+', ',"acquired_at":' .. now, 1))
end
local first = string.byte(ARGV[3])
local fast = first == 49 or (first == 48 and redis.call('EXISTS', KEYS[3]) == 0)
if fast then
  old = redis.pcall('SET', KEYS[1], value, 'NX', 'PX', ARGV[2], 'GET')
  if not old then
    local n = 0
    if KEYS[2] ~= KEYS[1] then
      n = redis.call('INCR', KEYS[2])
      if n >= 9007199254740992 then n = redis.call('GET', KEYS[2]) end
    end
    if value ~= ARGV[1] then return {1, n, value} end
    return {1, n}
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
local token = token_of(ARGV[1])
local holder = old
if not fast then holder = redis.pcall('GET', KEYS[1]) end
if type(holder) == 'table' then return not_a_lock(holder) end
if owns(holder, token) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, mint(KEYS[2]), holder}
end
local now = now_ms()
if not holder then
  if mode == '0' then
    local head = queue('LINDEX', KEYS[3], 0)
    for _ = 1, @HAND_OVER_STEPS@ do
      if not head then break end
      local entry = queue('HGET', KEYS[4], token_of(head))
      local deadline = entry and string.match(entry, '^(%d+)|')
      if deadline and tonumber(deadline) > now then return {0, 0} end
      queue('LPOP', KEYS[3])
      if entry then queue('HDEL', KEYS[4], token_of(head)) end
      head = queue('LINDEX', KEYS[3], 0)
    end
    if head then return {0, 0} end
    redis.call('SET', KEYS[1], value, 'PX', ARGV[2])
    if value ~= ARGV[1] then return {1, mint(KEYS[2]), value} end
    return {1, mint(KEYS[2])}
  end
  local served, blocked = serve(now, token)
  if served == 'self' or not (served or blocked) then
    if served == 'self' then queue('LPOP', KEYS[3]) end
    queue('HDEL', KEYS[4], token)
    local stored = stamp(ARGV[1], now)
    redis.call('SET', KEYS[1], stored, 'PX', ARGV[2])
    return {1, mint(KEYS[2]), stored}
  end
  holder = redis.call('GET', KEYS[1])
end
local held = held_kind(holder)
if held and excludes_plain(held) then return refuse(mode, held) end
if mode == '0' then return {0, redis.call('PTTL', KEYS[1])} end
enqueue(mode, seq, claim, lease, channel, now)
if not holder then return {0, 0} end
return {0, redis.call('PTTL', KEYS[1])}
