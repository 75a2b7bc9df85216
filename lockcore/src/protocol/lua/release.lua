-- Release (Redlock, on each node): compare-and-delete, as in the Redis SET documentation.
--
-- KEYS[1] lock key; ARGV[1] the lock value (or its token, its first word)
-- Reply: 1 when the key held the token and was deleted; 0 otherwise (expired, deleted, or
-- another holder's token): a stale holder never deletes another holder's key.
-- @include value_of
if owns(value_of(KEYS[1]), token_of(ARGV[1])) then
  return redis.call('DEL', KEYS[1])
end
return 0
