-- Helper: the direct grant of the fair queue, for the scripts whose keys are KEYS[1] the lock
-- key, KEYS[2] the caller's fencing counter (the lock key itself without fencing), KEYS[3] the
-- waiter queue, KEYS[4] the waiter entries and, for the scripts that serve shares, KEYS[5] the
-- share set (see shares.lua). Every key a script touches is one of these (they share the lock
-- key's cluster slot), so a script whose keys a slot migration has split fails before it
-- writes (TRYAGAIN). Needs entries.lua and shares.lua.
--
-- The queue is a list of waiters' lock values in arrival order. The entries are a hash, one
-- field per queued waiter's token:
--   <deadline_ms>|<ttl_ms>|<seq>|<claim_ms>|<counter length>|<counter key><channel>
-- the deadline (the server's clock, TIME) until which the waiter counts as live without a
-- re-check, the seq of its latest attempt (echoed by a grant), how long a lock handed to it
-- lives until its first renewal, and the counter and channel of its manager. A queued value
-- whose entry is gone or past its deadline is skipped (and dropped).
--
-- serve(now, self) hands the lock to the live waiters at the head of the queue, in order, as
-- far as they fit: when the key is free, to the first live waiter (a plain waiter takes the key
-- alone: its value is set with PX min(claim_ms, ttl_ms) and that ends the turn); while shares
-- of one kind are held (or once the first waiter was a share waiter), to each next waiter of
-- that kind while the shares are fewer than its capacity: consecutive readers together, a
-- semaphore's free permits in arrival order. A waiter that can never be served beside the
-- shares held (shares of another kind, or a plain lock beside a semaphore's permits) is passed
-- over: popped and woken with '<token> 0 0', so that its re-check refuses it (or, the shares
-- gone by then, queues it again). While the key is free but its share set keeps live shares
-- whose marker is gone (lost, see shares.lua), no share waiter is served. Each grant pops its
-- waiter, deletes its entry, mints its fencing token with the caller's counter (the waiter's
-- counter must be KEYS[2] or, without fencing, KEYS[1]: no other key is ever touched) and
-- publishes '<token> <fencing token> <seq> <stored value>' on its channel, the value stamped
-- with the time of the grant. A waiter whose counter is another key (or a share waiter when the
-- script has no KEYS[5]) is left at the head and woken with '<token> 0 0' to take its turn
-- itself. A refused PUBLISH (an ACL without the channel) is ignored: the grant stands, and the
-- waiter finds it at its next re-check. When the waiter to serve is self (a token), serve stops
-- and returns 'self': the caller takes the lock (and pops itself).
-- Returns what it did: 'self', the value granted alone, 'shares', 'recheck', or false; and
-- whether a live waiter is still waiting at the head (blocked: a newcomer must queue behind
-- it). At most @HAND_OVER_STEPS@ entries are passed per call (then blocked); the next call
-- goes on.
local function serve(now, self)
  local holder = value_of(KEYS[1])
  local cap, kind, count, orphans = nil, nil, 0, false
  if holder then
    if not (KEYS[5] and is_marker(holder)) then return false, true end
    cap, kind = share_of(holder)
    count = live_shares(now)
    if count == 0 then
      redis.call('DEL', KEYS[1], KEYS[5])
      kind = nil
    end
  elseif KEYS[5] then
    orphans = live_shares(now) > 0
  end
  local served = false
  for _ = 1, @HAND_OVER_STEPS@ do
    local head = queue('LINDEX', KEYS[3], 0)
    if not head then return served, false end
    local token = token_of(head)
    local entry = queue('HGET', KEYS[4], token)
    local deadline, ttl, seq, claim, len, rest
    if entry then deadline, ttl, seq, claim, len, rest = entry_fields(entry) end
    local px = ttl and math.min(tonumber(claim), tonumber(ttl))
    if px and px >= 1 and px <= @MAX_TTL_MS@ and tonumber(deadline) > now then
      local c, k = share_of(head)
      len = tonumber(len)
      local counter, channel = string.sub(rest, 1, len), string.sub(rest, len + 1)
      if kind and k ~= kind and (k or excludes_plain(kind)) then
        queue('LPOP', KEYS[3])
        queue('HDEL', KEYS[4], token)
        redis.pcall('PUBLISH', channel, token .. ' 0 0')
      else
        if (kind and (k ~= kind or count >= cap)) or (orphans and k) then return served, true end
        if token == self then return 'self', false end
        if (counter ~= KEYS[1] and counter ~= KEYS[2]) or (k and not KEYS[5]) then
          redis.pcall('PUBLISH', channel, token .. ' 0 0')
          return served or 'recheck', true
        end
        queue('LPOP', KEYS[3])
        queue('HDEL', KEYS[4], token)
        local fencing = decimal(mint(counter))
        local stored = stamp(head, now)
        if k then
          add_share(KEYS[1], KEYS[5], token, px, now, k)
          cap, kind, count, served = c, k, count + 1, 'shares'
        else
          redis.call('SET', KEYS[1], stored, 'PX', px)
        end
        redis.pcall('PUBLISH', channel, token .. ' ' .. fencing .. ' ' .. seq .. ' ' .. stored)
        if not k then return head, false end
      end
    else
      queue('LPOP', KEYS[3])
      if entry then queue('HDEL', KEYS[4], token) end
    end
  end
  return served, true
end
