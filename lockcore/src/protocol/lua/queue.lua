-- Helper: queue(command, key, ...) runs a command on the waiter queue KEYS[3] or its entries
-- KEYS[4]. A queue key of another type (not written by lockcore) is deleted, with its pair,
-- and the call returns false, as for an empty queue; any other error aborts the script.
local function queue(command, key, ...)
  local reply = redis.pcall(command, key, ...)
  if type(reply) == 'table' and reply.err then
    if not string.find(reply.err, 'WRONGTYPE', 1, true) then error(reply) end
    redis.call('DEL', KEYS[3], KEYS[4])
    return false
  end
  return reply
end
