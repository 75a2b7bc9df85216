-- Helpers: decimal integers as strings, exact over the whole u64 range (a Lua number is a
-- double, which would round them above 2^53).
--
-- canonical(s): whether s is a decimal without sign or leading zeros.
-- below(a, b): whether a < b, for canonical decimals: the longer is larger, then digit by
-- digit.
local function canonical(s)
  return string.match(s, '^%d+$') ~= nil and (#s == 1 or string.sub(s, 1, 1) ~= '0')
end
local function below(a, b)
  if #a ~= #b then return #a < #b end
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return false
end
