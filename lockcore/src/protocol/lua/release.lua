-- Release (Redlock, on each node): compare-and-delete, as in the Redis SET documentation.
--
-- KEYS[1] lock key; ARGV[1] the lock value (or its token, its first word), ARGV[2] (optional)
-- the minimum hold in ms: while it lasts, the key is kept with its TTL cut to what is left of
-- it, by this node's clock (see hold.lua), and counts as released; ARGV[3] (optional) the
-- lease's TTL in ms, keep()'s cap
-- Reply: 1 when the key held the token and was deleted; 0 otherwise (expired, deleted, or
-- another holder's token): a stale holder never deletes another holder's key.
-- @include value_of
-- @include hold
local value = value_of(KEYS[1])
if owns(value, token_of(ARGV[1])) then
  if ARGV[2] and keep(value, ARGV[2], ARGV[3]) then return 1 end
  return redis.call('DEL', KEYS[1])
end
return 0
