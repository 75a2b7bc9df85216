-- Helpers: read a lock key and recognise its holder.
--
-- value_of(key): the key's string value, false when the key is missing, and '' (never a
-- token) when the key holds another type; any other error of the GET (an ACL refusal, say)
-- aborts the script. A plain GET raises WRONGTYPE there, which aborts the whole script: one
-- foreign value would fail every key of a renewal batch.
-- token_of(value): the value's first word, its holder's token.
-- owns(value, token): whether value is the value of the holder whose token is token (a value
-- may carry holder metadata after its token, which a hand-over stamps).
local function value_of(key)
  local value = redis.pcall('GET', key)
  if type(value) == 'table' then
    if value.err and string.find(value.err, 'WRONGTYPE', 1, true) then return '' end
    error(value)
  end
  return value
end
local function token_of(value)
  return string.match(value, '^[^ ]*')
end
local function owns(value, token)
  return value and string.sub(value, 1, #token) == token
    and (#value == #token or string.byte(value, #token + 1) == 32)
end
