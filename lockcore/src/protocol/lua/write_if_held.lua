-- Writes an idempotency record only while its lock holds the writer's lock value: a call whose
-- lease ended (and whose lock another call may hold now) never stores.
--
-- KEYS[1] the record's lock key, KEYS[2] the record key (one cluster slot: see
-- keyspace::idempotency_keys)
-- ARGV[1] the writer's lock value, ARGV[2] the record (JSON), ARGV[3] its TTL in ms
-- Reply: 1 when the lock key held the writer's token and the record was set (SET .. PX); 0 when
-- it was missing or held another value or type (nothing was written).
-- @include value_of
if owns(value_of(KEYS[1]), token_of(ARGV[1])) then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
