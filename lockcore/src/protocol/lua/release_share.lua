-- Release a share (a semaphore's permit or a reader's share) on a single node, with direct
-- grant: the share is removed, and the waiters at the head of the queue are served as far as
-- they now fit (see hand_over.lua): the next permit to the first live waiter, the lock to a
-- queued writer once the last reader is gone. A value that holds no share (a waiter that gives
-- up) withdraws from the queue instead.
--
-- KEYS[1] lock key, KEYS[2] the caller's fencing counter, KEYS[3] waiter queue, KEYS[4] waiter
-- entries, KEYS[5] share set
-- ARGV[1] lock value (its token, the first word, is the member of the share set; a token alone
-- is a share of any kind)
-- Reply: 1 when the value held a live share under the marker of its kind (released), 0
-- otherwise (its lease had ended, it never held one, or its marker is gone: it was lost, see
-- shares.lua; its member is dropped all the same). The marker and the set then live until the
-- latest deadline of the shares left.
--
-- Cost: O(log N) in the N shares held (ZREM, ZREMRANGEBYSCORE of the ended ones, ZCARD, and
-- ZRANGE of the last deadline), plus the queue entries passed; never a scan of the holders.
-- @include value_of
-- @include fencing
-- @include queue
-- @include entries
-- @include shares
-- @include hand_over
local token = token_of(ARGV[1])
local score = redis.call('ZSCORE', KEYS[5], token)
if not score then
  queue('HDEL', KEYS[4], token)
  queue('LREM', KEYS[3], 0, ARGV[1])
  return 0
end
local now = now_ms()
redis.call('ZREM', KEYS[5], token)
local held = held_kind(value_of(KEYS[1]))
if held then
  if live_shares(now) == 0 then redis.call('DEL', KEYS[1], KEYS[5])
  else keep_shares(KEYS[1], KEYS[5], now) end
end
serve(now, false)
local _, kind = share_of(ARGV[1])
if tonumber(score) > now and held and (not kind or held == kind) then return 1 end
return 0
