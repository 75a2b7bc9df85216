-- Redlock: raises a node's fencing counter to at least a token minted on another node.
--
-- KEYS[1] fencing counter key; ARGV[1] the fencing token, in decimal
-- Reply: 1. Never lowers the counter; compared as decimals (decimal.lua), exact over the
-- counter's whole range.
-- @include decimal
if below(redis.call('GET', KEYS[1]) or '0', ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1])
end
return 1
