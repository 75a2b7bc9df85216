-- Acquire of several keys on one node in one call: all keys, or none.
--
-- KEYS[3i-2] lock key i, KEYS[3i-1] its fencing counter (several keys may name the same
-- counter), KEYS[3i] its waiter queue
-- ARGV[1] ttl in ms, ARGV[i+1] the value of lock key i
-- When no lock key exists (of any type: EXISTS never raises WRONGTYPE) and no key has a waiter
-- queue (a queued waiter has the turn: the fair queue is never jumped), sets every key with PX
-- and mints one fencing token per key (an INCR of its counter, in key order, exact over the
-- counter's whole range; 0 without fencing, where the counter key is the lock key itself).
-- Reply: {1, token_1, .., token_n}; otherwise {0}, and nothing was written.
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
