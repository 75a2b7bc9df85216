-- Helper: enqueue(mode, seq, claim, lease, channel, now) queues the caller's waiter (its value
-- ARGV[1], its ttl ARGV[2], its counter KEYS[2]; see acquire_queued.lua for the ticket) in the
-- waiter queue KEYS[3], or refreshes its entry in KEYS[4] (see hand_over.lua for the layout):
-- a first attempt (mode 1) and a re-check whose entry is gone or past its deadline (it was
-- presumed dead) go to the back; a live re-check keeps its place. The queue keys expire on
-- their own once no waiter refreshes them.
-- refuse(mode, held): the reply {-2, held} to a caller that the kind of the key refuses (see
-- shares.lua): a re-check (mode 2) first leaves the queue, its entry and its place.
local function enqueue(mode, seq, claim, lease, channel, now)
  local token = token_of(ARGV[1])
  local entry = decimal(now + tonumber(lease)) .. '|' .. ARGV[2] .. '|' .. seq .. '|' .. claim .. '|' .. #KEYS[2] .. '|' .. KEYS[2] .. channel
  local lapsed = true
  if mode == '2' then
    local before = queue('HGET', KEYS[4], token)
    local deadline = before and string.match(before, '^(%d+)|')
    lapsed = not (deadline and tonumber(deadline) > now)
  end
  if queue('HSET', KEYS[4], token, entry) == false then queue('HSET', KEYS[4], token, entry) end
  if lapsed then
    if mode == '2' then queue('LREM', KEYS[3], 0, ARGV[1]) end
    queue('RPUSH', KEYS[3], ARGV[1])
  end
  local keep = math.max(@QUEUE_TTL_FLOOR_MS@, 4 * tonumber(lease))
  redis.call('PEXPIRE', KEYS[3], keep)
  redis.call('PEXPIRE', KEYS[4], keep)
end
local function refuse(mode, held)
  if mode == '2' then
    queue('HDEL', KEYS[4], token_of(ARGV[1]))
    queue('LREM', KEYS[3], 0, ARGV[1])
  end
  return {-2, held}
end
