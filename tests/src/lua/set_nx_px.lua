-- Fixture: a script that writes its first key, to see where a cluster routes it.
-- KEYS[1] key; ARGV[1] value, ARGV[2] ttl in ms. Reply: SET's.
return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
