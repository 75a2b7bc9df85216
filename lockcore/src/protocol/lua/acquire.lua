-- Acquire on one Redlock node: SET key value NX PX ttl, and on success mint the fencing token
-- in the same script.
--
-- KEYS[1] lock key, KEYS[2] fencing counter key (the lock key again: no fencing)
-- ARGV[1] lock value, ARGV[2] ttl in ms
-- Reply: {1, fencing_token} (0 without fencing) when acquired; {0, pttl_ms} of the current
-- holder otherwise (-1: the key has no expiry); {-1, type} when the key holds another type.
-- @include fencing
-- @include not_a_lock
local old = redis.pcall('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2], 'GET')
if not old then return {1, mint(KEYS[2])} end
if type(old) == 'table' then return not_a_lock(old) end
return {0, redis.call('PTTL', KEYS[1])}
