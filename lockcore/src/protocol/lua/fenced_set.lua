-- The fenced write of FencedRedis: compare the stored fence with the caller's token and write
-- value and token together, atomically.
--
-- KEYS[1] the resource key, a hash with fields value and fence
-- ARGV[1] the fencing token (decimal u64), ARGV[2] the value
-- Reply: {1, token} when written; {0, stored_fence} when the stored fence is newer. Tokens are
-- compared as decimals (decimal.lua), not as Lua numbers.
-- @include decimal
local token = ARGV[1]
if not canonical(token) then
  return redis.error_reply('ERR fencing token must be a decimal u64 without leading zeros')
end
local stored = redis.call('HGET', KEYS[1], 'fence')
if stored then
  if not canonical(stored) then
    return redis.error_reply('ERR the fence field of the resource key is not a decimal u64')
  end
  if below(token, stored) then
    return {0, stored}
  end
end
redis.call('HSET', KEYS[1], 'value', ARGV[2], 'fence', token)
return {1, token}
