-- Helpers: the server's clock and the waiter entries of the fair queue (see hand_over.lua for
-- the queue's layout).
--
-- now_ms(): the server's clock (TIME) in ms since the Unix epoch.
-- stamp(value, now): value with its acquired_at set to now.
-- entry_fields(entry): deadline, ttl, seq, claim, counter length and the rest (counter key and
-- channel) of a waiter's entry, as strings; nil for a malformed entry.
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
