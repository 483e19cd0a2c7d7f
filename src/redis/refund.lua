-- shuffle-limiter: tokens given back to the buckets that paid a grant, on
-- the Redis server.
--
-- This is `refund`, then `unheld`, of src/draw/rescale.rs for each bucket,
-- in integer microseconds; the differential test in
-- src/redis/script/changes.rs feeds both the same inputs. The Rust side
-- puts prelude.lua and held.lua before it.
--
-- KEYS[i]      the keys of the buckets to pay back.
-- KEYS[m + 1]  the quota key, "{limiter-name}:quota".
-- KEYS[m + 2]  with ARGV[3] above 0: the hold-off hash, "{limiter-name}:held"
--              (holdoff.lua), the instant each bucket is held until.
-- ARGV[1]      the quota version the credits were counted in.
-- ARGV[2]      the quota version the grant was drawn under: a bucket that
--              a change of N added after it ("<key>:born" holds the version
--              that added it; missing: built with it) is not the bucket
--              that paid, and gets nothing.
-- ARGV[3]      the interval between two tokens of a bucket, in
--              microseconds, when KEYS[m + 2] is given; 0 when it is not
--              (the spread layout keeps no hold-off hash).
-- ARGV[2i + 2] the credit, in microseconds, to give back to KEYS[i].
-- ARGV[2i + 3] the capacity of KEYS[i], in microseconds: a bucket owing
--              more has bookings waiting on all of it, and gets nothing.
-- ARGV[2m + 4] absent in production (the server's clock); the test's time.
--
-- Reply: { 1, version, then per bucket 1 if it is the one that paid, 0 if
-- it was born since } once given back, or { 0, version } when the key
-- holds another version than ARGV[1]: nothing is given back, and the caller
-- reads the quota and asks again.

local interval = ARGV[3] + 0
local payers = #KEYS - 1
local held_key = nil
if interval > 0 then
  payers = #KEYS - 2
  held_key = KEYS[payers + 2]
end
local version, stop = expect_quota(KEYS[payers + 1], ARGV[1], 0)
if stop then
  return stop
end
local now = clock(ARGV[2 * payers + 4])
local drawn_under = ARGV[2] + 0

-- Everything is read before anything is written: a key of another type
-- refuses the whole refund (a script's writes are not undone by its
-- error), as draw.lua refuses a draw.
local function read(key)
  local value = redis.pcall('GET', key)
  if type(value) == 'table' and value.err then
    return nil, redis.error_reply('NOTABUCKET ' .. key .. ' holds another type: ' .. value.err)
  end
  return value
end
local reply, tats = { 1, version }, {}
for i = 1, payers do
  local born, bad = read(KEYS[i] .. ':born')
  if bad then
    return bad
  end
  if born then
    born = tonumber(born)
    -- Not a version: as if born after every grant, so it gets nothing.
    if not born or born ~= born or born % 1 ~= 0 then
      born = math.huge
    end
  else
    born = 0
  end
  local tat
  tat, bad = read(KEYS[i])
  if bad then
    return bad
  end
  reply[2 + i] = born <= drawn_under and 1 or 0
  tats[i] = reply[2 + i] == 1 and tonumber(tat)
end

for i = 1, payers do
  -- A missing key is a full bucket, and a full one takes nothing back; a
  -- string that is not a time is left for draw.lua to repair.
  local tat = tats[i]
  local capacity = ARGV[2 * i + 3] + 0
  if tat and tat == tat and tat % 1 == 0 and tat > now and tat < 9007199254740992
    and tat - now <= capacity then
    local back = tat - ARGV[2 * i + 2]
    if back < now then
      back = now
    end
    store(KEYS[i], unheld(tat, back, held_key, KEYS[i], capacity, interval, now), now)
  end
end
return reply
