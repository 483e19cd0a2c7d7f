-- shuffle-limiter: a lease given back: its own members removed, nothing
-- else (a late release, after the lease expired and its seats went to
-- another token, removes nothing).
--
-- This is `release` of src/inflight/lease/model.rs.
--
-- KEYS[j]      the pools the lease holds seats of.
-- ARGV[j]      its member in KEYS[j], "<token>:<seats>".
--
-- Reply: how many members were removed. A key of another type is left as
-- it is, with NOTAPOOL.

local removed = 0
for j = 1, #KEYS do
  local gone = redis.pcall('ZREM', KEYS[j], ARGV[j])
  if type(gone) == 'table' and gone.err then
    return not_a_pool(KEYS[j], 'holds another type: ' .. gone.err)
  end
  removed = removed + gone
end
return removed
