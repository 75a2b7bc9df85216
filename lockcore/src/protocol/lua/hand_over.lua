-- Helpers: the direct grant of the fair queue, for acquire_queued.lua and release_handoff.lua,
-- whose keys are both KEYS[1] the lock key, KEYS[2] the caller's fencing counter (the lock key
-- itself without fencing), KEYS[3] the waiter queue, KEYS[4] the waiter entries. Every key a
-- script touches is one of these four (they share the lock key's cluster slot), so a script
-- whose keys a slot migration has split fails before it writes (TRYAGAIN).
--
-- The queue is a list of waiters' lock values in arrival order. The entries are a hash, one
-- field per queued waiter's token:
--   <deadline_ms>|<ttl_ms>|<seq>|<claim_ms>|<counter length>|<counter key><channel>
-- the deadline (the server's clock, TIME) until which the waiter counts as live without a
-- re-check, the seq of its latest attempt (echoed by a grant), how long a lock handed to it
-- lives until its first renewal, and the counter and channel of its manager. A queued value
-- whose entry is gone or past its deadline is skipped.
--
-- now_ms(): the server's clock in ms. stamp(value, now): value with its acquired_at set.
--
-- hand_over(head, self, now) gives the free lock key to the first live waiter, starting with
-- head (just popped from the queue): it pops the queue until an entry is live, deletes the
-- entries it passes, and (unless that waiter is self, a token: then it returns true and the
-- caller takes the key) sets the lock key to the waiter's value, stamped with the time of the
-- grant, with PX min(claim_ms, ttl_ms), mints its fencing token with the caller's counter (the
-- waiter's counter must be KEYS[2] or, without fencing, KEYS[1]: no other key is ever touched)
-- and publishes '<token> <fencing token> <seq> <stored value>' on its channel. A waiter whose
-- counter is another key is put back at the head and woken with '<token> 0 0' to take the key
-- itself ('recheck'). A refused PUBLISH (an ACL without the channel) is ignored: the grant
-- stands, and the waiter finds the key holding its value at its next re-check. Returns the
-- value granted, true, 'recheck', or false when no live waiter is queued. At most
-- @HAND_OVER_STEPS@ entries are passed per call; the next call goes on.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function stamp(value, now)
  return (string.gsub(value, ',"acquired_at":%d+', ',"acquired_at":' .. string.format('%d', now), 1))
end
local function entry_fields(entry)
  return string.match(entry, '^(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|(.*)$')
end
local function hand_over(head, self, now)
  for _ = 1, @HAND_OVER_STEPS@ do
    if not head then return false end
    local token = token_of(head)
    local entry = queue('HGET', KEYS[4], token)
    if entry then
      queue('HDEL', KEYS[4], token)
      local deadline, ttl, seq, claim, len, rest = entry_fields(entry)
      local px = ttl and math.min(tonumber(claim), tonumber(ttl))
      if px and px >= 1 and px <= @MAX_TTL_MS@ and tonumber(deadline) > now then
        if token == self then return true end
        len = tonumber(len)
        local counter, channel = string.sub(rest, 1, len), string.sub(rest, len + 1)
        if counter ~= KEYS[1] and counter ~= KEYS[2] then
          queue('LPUSH', KEYS[3], head)
          queue('HSET', KEYS[4], token, entry)
          redis.pcall('PUBLISH', channel, token .. ' 0 0')
          return 'recheck'
        end
        local fencing = decimal(mint(counter))
        local stored = stamp(head, now)
        redis.call('SET', KEYS[1], stored, 'PX', px)
        redis.pcall('PUBLISH', channel, token .. ' ' .. fencing .. ' ' .. seq .. ' ' .. stored)
        return head
      end
    end
    head = queue('LPOP', KEYS[3])
  end
  return false
end
