-- Helper: the minimum hold of a job lock (LockOptions::hold_at_least), for the release scripts.
--
-- keep(value, at_least, cap): the release of KEYS[1], whose value is value (the caller's), with
-- a minimum of at_least ms after the acquire, measured by this server's clock: the value's
-- acquired_at (stamped with TIME by the acquire or the hand-over) is compared with TIME now.
-- When some of the minimum is left, the key keeps the value and gets PEXPIRE remaining, unless
-- its TTL ends sooner (the upper bound), and keep returns true; otherwise (the minimum has
-- passed, or the value has no acquired_at) it returns false and the caller deletes. cap
-- (optional, ms) is the lease's TTL: the bound is then the longer of the key's TTL and cap, so
-- a key handed over by the queue, which still lives its claim window (shorter than the lease),
-- is kept for the minimum too; the minimum never exceeds the lease's TTL.
local function keep(value, at_least, cap)
  local at = string.match(value, ',"acquired_at":(%d+)')
  if not at then return false end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local left = tonumber(at_least) - (now - tonumber(at))
  if left < 1 then return false end
  local pttl = redis.call('PTTL', KEYS[1])
  local target = left
  if pttl ~= -1 then
    target = math.min(left, math.max(pttl, tonumber(cap) or 0))
  end
  if target ~= pttl then
    redis.call('PEXPIRE', KEYS[1], string.format('%d', target))
  end
  return true
end
