-- Extend and watchdog renewal of shares (a semaphore's permits, readers' shares): for each,
-- when its token holds a live share, its deadline is set to now + ttl (the server's clock; it
-- sets, never adds) and the lock key's marker and the share set are kept alive at least as
-- long. A share whose lease ended is never re-created.
--
-- KEYS[2i-1] lock key and KEYS[2i] share set of share i; ARGV[2i-1] its lock value (or token),
-- ARGV[2i] its new ttl in ms
-- Reply: one entry per share: 1 when renewed, 0 otherwise.
-- On Redis Cluster all keys of one call must share a slot (one share per call always does).
-- @include value_of
-- @include entries
local now = now_ms()
local renewed = {}
for i = 1, #KEYS / 2 do
  local lock, set = KEYS[2 * i - 1], KEYS[2 * i]
  local token, px = token_of(ARGV[2 * i - 1]), tonumber(ARGV[2 * i])
  local score = redis.call('ZSCORE', set, token)
  renewed[i] = 0
  if score and tonumber(score) > now and value_of(lock) then
    redis.call('ZADD', set, 'XX', now + px, token)
    if redis.call('PTTL', lock) < px then redis.call('PEXPIRE', lock, px) end
    if redis.call('PTTL', set) < px then redis.call('PEXPIRE', set, px) end
    renewed[i] = 1
  end
end
return renewed
