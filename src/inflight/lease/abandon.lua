-- shuffle-limiter: an acquire its caller gave up on (its deadline missed,
-- its future dropped while the round trip was out) given back, whether the
-- server ran it already or not yet.
--
-- This is `abandon` of src/inflight/lease/model.rs.
--
-- KEYS[j]      the pools the acquire asked for (j = 1..m).
-- KEYS[m + 1]  its record, "{name}:acq:<id>" (see acquire.lua).
-- ARGV[1]      how long a tombstone lives, in milliseconds.
--
-- The record holds a token: the acquire ran and leased it. Every member of
-- that token is removed from the pools, and the record deleted; reply: how
-- many members were removed. No record: the acquire has not run yet (or it
-- was refused, or its record expired): a tombstone takes its place, so
-- that the acquire takes nothing if it runs later; reply -1. A tombstone
-- already: nothing; reply 0. A record that is neither, or (for a token)
-- a pool of another type, is refused with NOTAPOOL before anything is
-- written.

local TOMBSTONE = 'abandoned'
local m = #KEYS - 1
local record = KEYS[m + 1]
local held = redis.pcall('GET', record)
if type(held) == 'table' and held.err then
  return not_a_pool(record, 'is not an acquire record: ' .. held.err)
end
if not held then
  redis.call('SET', record, TOMBSTONE, 'PX', ARGV[1])
  return -1
end
if held == TOMBSTONE then
  return 0
end
if not (string.match(held, '^%d+$') and tonumber(held) < 9007199254740992) then
  return not_a_pool(record, 'is not an acquire record: ' .. shown(held))
end
-- Every pool read before any is written.
local prefix = held .. ':'
local mine = {}
for j = 1, m do
  local members = redis.pcall('ZRANGE', KEYS[j], 0, -1)
  if type(members) == 'table' and members.err then
    return not_a_pool(KEYS[j], 'holds another type: ' .. members.err)
  end
  mine[j] = {}
  for _, member in ipairs(members) do
    if string.sub(member, 1, #prefix) == prefix then
      table.insert(mine[j], member)
    end
  end
end
local removed = 0
for j = 1, m do
  for _, member in ipairs(mine[j]) do
    removed = removed + redis.call('ZREM', KEYS[j], member)
  end
end
redis.call('DEL', record)
return removed
