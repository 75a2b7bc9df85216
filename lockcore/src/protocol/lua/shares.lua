-- Helpers: shares, the leases of a semaphore's permits and of a read-write lock's readers.
-- KEYS[1] is the lock key and KEYS[5] its share set, a sorted set of the holders' tokens scored
-- by their lease deadlines (the server's clock, ms since the Unix epoch).
--
-- While shares are held the lock key holds the marker '@SHARES_MARKER@ {<kind>}' (a string, so
-- a plain SET NX of the lock key finds it held and queues): its kind is '"permits":<n>' (a
-- semaphore of n permits) or '"mode":"read"' (readers), and it lives until the last share's
-- deadline. A share's own lock value carries its kind in its metadata (',<kind>}' at its end).
-- A share counts only under the marker of its kind: members of the set whose marker is gone (an
-- operator's DEL, an eviction) are lost; they renew no more, and no share is admitted beside
-- them until they end or their holder's renewal or release drops them.
--
-- share_of(value): the capacity (n, or a number no count reaches for readers) and the kind of
-- a share value or a marker; nil for any other value (a plain lock).
-- is_marker(value): whether value is the marker.
-- held_kind(value): the kind the marker value names ('' for a marker without one); nil when
-- value is not the marker (missing, a plain lock).
-- excludes_plain(kind): whether a plain lock can never be granted beside shares of kind (a
-- semaphore's: its key is never a plain lock's); readers only make a plain lock wait.
-- live_shares(now): drops the shares whose lease ended (ZREMRANGEBYSCORE: O(log N + dropped))
-- and returns how many are left.
-- first_end(now): ms until the first live share ends (at least 1), 0 without shares.
-- keep_shares(lock, set, now): the marker at lock and the set live until the last share's end
-- (O(log N)), shorter or longer than before, or are deleted when no share is left.
-- add_share(lock, set, token, px, now, kind): token holds a share of kind until now + px; the
-- marker is set (or kept) and it and the set live at least as long.
local function share_of(value)
  local n = string.match(value, '[{,]"permits":(%d+)[,}]')
  if n then return tonumber(n), '"permits":' .. n end
  if string.find(value, '"mode":"read"}', 1, true) then return 9007199254740992, '"mode":"read"' end
  return nil
end
local function is_marker(value)
  return string.sub(value, 1, @SHARES_MARKER_LEN@ + 1) == '@SHARES_MARKER@ '
end
local function held_kind(value)
  if not (value and is_marker(value)) then return nil end
  local _, kind = share_of(value)
  return kind or ''
end
local function excludes_plain(kind)
  return kind ~= '"mode":"read"'
end
local function live_shares(now)
  redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now)
  return redis.call('ZCARD', KEYS[5])
end
local function first_end(now)
  local first = redis.call('ZRANGE', KEYS[5], 0, 0, 'WITHSCORES')
  if not first[2] then return 0 end
  return math.max(1, tonumber(first[2]) - now)
end
local function keep_shares(lock, set, now)
  local last = redis.call('ZRANGE', set, -1, -1, 'WITHSCORES')
  local left = last[2] and tonumber(last[2]) - now
  if not left or left < 1 then
    redis.call('DEL', lock, set)
    return
  end
  redis.call('PEXPIRE', lock, left)
  redis.call('PEXPIRE', set, left)
end
local function add_share(lock, set, token, px, now, kind)
  px = tonumber(px)
  redis.call('ZADD', set, now + px, token)
  local marker = redis.call('GET', lock)
  if not marker then
    redis.call('SET', lock, '@SHARES_MARKER@ {' .. kind .. '}', 'PX', px)
  elseif redis.call('PTTL', lock) < px then
    redis.call('PEXPIRE', lock, px)
  end
  if redis.call('PTTL', set) < px then redis.call('PEXPIRE', set, px) end
end
