-- How many shares a lock key's share set holds now, for Semaphore::available. Writes nothing.
--
-- KEYS[1] lock key, KEYS[2] share set
-- Reply: {0} when the lock is free; {1} when a plain lock holds it; {2, count, kind} when
-- shares of kind hold it (count: those whose lease has not ended, ZCOUNT: O(log N)); {3,
-- count} when no marker is there but count live shares are (lost with their marker, they keep
-- every new share out until they end, see shares.lua); {-1, type} when the lock key holds
-- another type than a string.
local holder = redis.pcall('GET', KEYS[1])
if type(holder) == 'table' then
  if not (holder.err and string.find(holder.err, 'WRONGTYPE', 1, true)) then error(holder) end
  return {-1, redis.call('TYPE', KEYS[1])['ok']}
end
if holder and string.sub(holder, 1, @SHARES_MARKER_LEN@ + 1) ~= '@SHARES_MARKER@ ' then return {1} end
local t = redis.call('TIME')
local live = redis.call('ZCOUNT', KEYS[2], '(' .. string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)), '+inf')
if not holder then
  if live > 0 then return {3, live} end
  return {0}
end
return {2, live, string.match(holder, '^[^ ]* {(.*)}$') or ''}
