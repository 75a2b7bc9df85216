-- Fixture: the nemesis' fenced read, on the hash layout of lockcore's FencedRedis (fields
-- `value` and `fence`; tokens compared as decimal strings).
-- KEYS[1] the resource hash; ARGV[1] the reader's fencing token.
-- Reply: {1, value} after raising the fence, {0, fence} when the stored fence is newer.
local fence = redis.call('HGET', KEYS[1], 'fence') or '0'
local token = ARGV[1]
if #fence > #token or (#fence == #token and fence > token) then
  return {0, fence}
end
redis.call('HSET', KEYS[1], 'fence', token)
return {1, redis.call('HGET', KEYS[1], 'value') or '0:0'}
