-- shuffle-limiter: the lease of a token given back, whatever seats it
-- holds of each pool: for an acquire whose reply never came (its caller
-- gave up at the deadline, or was dropped), which may have leased or not.
-- The caller chose the token, so no other lease holds it.
--
-- This is `release_token` of src/inflight/lease/model.rs.
--
-- KEYS[j]  the pools the acquire asked for.
-- ARGV[1]  the token.
--
-- Reply: how many members were removed. A key of another type is left as
-- it is, with NOTAPOOL.

local prefix = ARGV[1] .. ':'
local removed = 0
for j = 1, #KEYS do
  local members = redis.pcall('ZRANGE', KEYS[j], 0, -1)
  if type(members) == 'table' and members.err then
    return not_a_pool(KEYS[j], 'holds another type: ' .. members.err)
  end
  for _, member in ipairs(members) do
    if string.sub(member, 1, #prefix) == prefix then
      removed = removed + redis.call('ZREM', KEYS[j], member)
    end
  end
end
return removed
