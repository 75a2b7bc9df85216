-- Read one key for an operator (lockctl): its type, its value when it is a string, its PTTL and
-- the clock of the node that holds it, in one atomic call on that node (a keyless TIME sent
-- beside it in a pipeline could go to any node of a cluster). Writes nothing.
--
-- KEYS[1] the key
-- Reply: {type, value or false (nil) unless a string, pttl_ms, seconds, microseconds}; type is
-- 'none' when the key is missing.
local kind = redis.call('TYPE', KEYS[1])['ok']
local value = false
if kind == 'string' then value = redis.call('GET', KEYS[1]) end
local now = redis.call('TIME')
return {kind, value, redis.call('PTTL', KEYS[1]), now[1], now[2]}
