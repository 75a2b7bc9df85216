-- Fixture: the hand-off floor's claim: the key holds the waiter's value, so set its full TTL
-- and mint a token.
-- KEYS[1] lock key, KEYS[2] counter; ARGV[1] the waiter's value. Reply: the token, or 0.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], 10000)
  return redis.call('INCR', KEYS[2])
end
return 0
