-- Fixture (not lockcore's protocol): the compare-and-delete of the Redis SET documentation, as
-- a naive client or the floor of a benchmark releases.
-- KEYS[1] lock key; ARGV[1] the exact value. Reply: 1 when deleted, 0 otherwise.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
