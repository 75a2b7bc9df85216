-- Acquire on one Redlock node: SET key value NX PX ttl, and on success mint the fencing token
-- in the same script.
--
-- KEYS[1] lock key, KEYS[2] fencing counter key (the lock key again: no fencing)
-- ARGV[1] lock value, ARGV[2] ttl in ms, ARGV[3] (optional) '1': the value is set with its
-- acquired_at stamped with this node's time (TIME), which a release's minimum hold is measured
-- from on this node (hold.lua)
-- Reply: {1, fencing_token} (0 without fencing) when acquired; {0, pttl_ms} of the current
-- holder otherwise (-1: the key has no expiry); {-1, type} when the key holds another type.
-- @include fencing
-- @include not_a_lock
local value = ARGV[1]
if ARGV[3] == '1' then
  local t = redis.call('TIME')
  local now = string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
  value = (string.gsub(value, ',"acquired_at":%d+', ',"acquired_at":' .. now, 1))
end
local old = redis.pcall('SET', KEYS[1], value, 'NX', 'PX', ARGV[2], 'GET')
if not old then return {1, mint(KEYS[2])} end
if type(old) == 'table' then return not_a_lock(old) end
return {0, redis.call('PTTL', KEYS[1])}
