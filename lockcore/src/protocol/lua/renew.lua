-- Extend and watchdog renewal: compare-and-PEXPIRE over one or more keys. Sets the TTL (never
-- adds to it) and never re-creates a missing key.
--
-- KEYS[i] lock keys; ARGV[2i-1] the lock value (or its token) of KEYS[i], ARGV[2i] its new
-- ttl in ms
-- Reply: one entry per key: 1 when the key held the token and its TTL was set, 0 otherwise.
-- On Redis Cluster all keys of one call must share a slot (one key per call always does).
-- @include value_of
local renewed = {}
for i = 1, #KEYS do
  if owns(value_of(KEYS[i]), token_of(ARGV[2 * i - 1])) then
    renewed[i] = redis.call('PEXPIRE', KEYS[i], ARGV[2 * i])
  else
    renewed[i] = 0
  end
end
return renewed
