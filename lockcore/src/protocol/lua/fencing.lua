-- Helpers: fencing tokens.
--
-- mint(counter): increments the fencing counter and returns the new token, or 0 when counter
-- is KEYS[1], the lock key itself (fencing off: no counter is touched). A Lua number is a
-- double, exact only up to 2^53: above that INCR's reply is rounded, so the counter is read
-- back as a string and that is returned (the client parses either). Exact up to i64::MAX.
-- decimal(n): a token (number or string) in decimal.
local function mint(counter)
  if counter == KEYS[1] then return 0 end
  local n = redis.call('INCR', counter)
  if n >= 9007199254740992 then return redis.call('GET', counter) end
  return n
end
local function decimal(n)
  if type(n) == 'number' then return string.format('%d', n) end
  return n
end
