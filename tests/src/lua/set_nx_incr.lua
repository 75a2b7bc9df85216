-- Fixture: the fenced floor's acquire, SET NX PX and on success INCR of the fencing counter.
-- KEYS[1] lock key, KEYS[2] counter; ARGV[1] value, ARGV[2] ttl in ms.
-- Reply: the fencing token, or 0 when the key was held.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return 0
