-- Extend and watchdog renewal of shares (a semaphore's permits, readers' shares): for each,
-- when its token holds a live share and the lock key holds the marker of its kind, its deadline
-- is set to now + ttl (the server's clock; it sets, never adds) and the marker and the share set
-- live until the latest deadline of the shares (see keep_shares in shares.lua: an extend to a
-- shorter ttl shortens them). A share whose lease ended is never re-created; a share whose
-- marker is gone or names another kind (an operator's DEL, an eviction, the key taken since) is
-- lost, and its member is dropped.
--
-- KEYS[2i-1] lock key and KEYS[2i] share set of share i; ARGV[2i-1] its lock value (or token:
-- then a marker of any kind will do), ARGV[2i] its new ttl in ms
-- Reply: one entry per share: 1 when renewed, 0 otherwise.
-- On Redis Cluster all keys of one call must share a slot (one share per call always does).
-- @include value_of
-- @include entries
-- @include shares
local now = now_ms()
local renewed = {}
for i = 1, #KEYS / 2 do
  local lock, set = KEYS[2 * i - 1], KEYS[2 * i]
  local value, px = ARGV[2 * i - 1], tonumber(ARGV[2 * i])
  local token = token_of(value)
  local _, kind = share_of(value)
  local held = held_kind(value_of(lock))
  local score = redis.call('ZSCORE', set, token)
  renewed[i] = 0
  if score and tonumber(score) > now and held and (not kind or held == kind) then
    redis.call('ZADD', set, 'XX', now + px, token)
    keep_shares(lock, set, now)
    renewed[i] = 1
  elseif score then
    redis.call('ZREM', set, token)
  end
end
return renewed
