-- Helper: not_a_lock(reply) is the reply {-1, <type>} for a lock key KEYS[1] that holds
-- another type than a string, from the error reply of a GET on it; any other error aborts the
-- script. No lock holder ever writes such a key: it is reported at once, not as a lock
-- somebody holds.
local function not_a_lock(reply)
  if not (reply.err and string.find(reply.err, 'WRONGTYPE', 1, true)) then error(reply) end
  return {-1, redis.call('TYPE', KEYS[1])['ok']}
end
