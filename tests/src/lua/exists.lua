-- Fixture: a script that reads every key it is given (EXISTS), to see where a cluster routes it.
-- KEYS the keys. Reply: how many exist.
return redis.call('EXISTS', unpack(KEYS))
