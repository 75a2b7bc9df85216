-- Release on a single node, with direct grant: compare-and-delete, except that when a live
-- waiter is queued the key is handed to it instead (see hand_over.lua): its lease, its fencing
-- token and its wake-up come from this one call. A value that does not hold the key (a waiter
-- that gives up) withdraws from the queue instead.
--
-- KEYS[1] lock key, KEYS[2] the caller's fencing counter, KEYS[3] waiter queue, KEYS[4] waiter
-- entries, KEYS[5] (optional) the share set: with it, waiters for shares at the head are
-- granted their shares (consecutive readers together)
-- ARGV[1] lock value (the holder is recognised by its token, the value's first word: a
-- hand-over stamps the rest), ARGV[2] (optional) the minimum hold in ms: while it lasts, the
-- key keeps its value, with its TTL set to what is left of the minimum (see hold.lua), and no
-- waiter is handed the key (they take it at their re-check once it expires); ARGV[3] (with
-- ARGV[2], optional) the lease's TTL in ms, the bound of that TTL when the key still lives a
-- hand-over's shorter claim window
-- Reply: 1 when the key held the value (and was deleted or handed over), 0 when the key was
-- missing, -1 when it holds another value (another holder's token, or another type).
--
-- A lock handed to a waiter lives its claim window (at most the waiter's TTL) until its new
-- holder's first renewal sets the full TTL, so a waiter that died while queued holds the others
-- up for at most that long. With nobody queued this is GET, LINDEX (nothing) and DEL; that
-- fast path runs before any helper is defined.
local holder = redis.pcall('GET', KEYS[1])
local token = string.match(ARGV[1], '^[^ ]*')
if type(holder) == 'string' and string.sub(holder, 1, #token) == token
  and (#holder == #token or string.byte(holder, #token + 1) == 32) then
  if ARGV[2] then
    -- @include hold
    if keep(holder, ARGV[2], ARGV[3]) then return 1 end
  end
  local head = redis.pcall('LINDEX', KEYS[3], 0)
  if not head then return redis.call('DEL', KEYS[1]) end
  -- @include value_of
  -- @include fencing
  -- @include queue
  -- @include entries
  -- @include shares
  -- @include hand_over
  redis.call('DEL', KEYS[1])
  serve(now_ms(), false)
  return 1
end
-- @include queue
if type(holder) == 'table' then
  if not (holder.err and string.find(holder.err, 'WRONGTYPE', 1, true)) then error(holder) end
  holder = ''
end
queue('HDEL', KEYS[4], token)
queue('LREM', KEYS[3], 0, ARGV[1])
return holder and -1 or 0
