-- shuffle-limiter: a grant settled above what it took: the tokens beyond
-- it charged to the buckets that paid it, on the Redis server.
--
-- This is `charge` of src/draw/rescale.rs for each bucket in turn, in
-- integer microseconds; the differential test in src/redis/script/hold.rs
-- feeds both the same inputs.
--
-- KEYS[i]      the keys of the buckets that paid, in the order they paid.
-- KEYS[m + 1]  the quota key, "{limiter-name}:quota".
-- ARGV[1]      the quota version the capacities come from.
-- ARGV[2]      the quota version the grant was drawn under: a bucket that
--              a change of N added after it ("<key>:born") is not one that
--              paid, and is charged nothing.
-- ARGV[3]      the tokens to charge, over all of them.
-- ARGV[4]      the buckets' interval, in microseconds.
-- ARGV[4 + i]  the capacity of KEYS[i], in microseconds.
-- ARGV[m + 5]  absent in production (the server's clock); the test's time.
--
-- Reply: { 1, version, then per bucket the tokens charged to it } once
-- charged, or { 0, version } when the key holds another version than
-- ARGV[1]: nothing is charged, and the caller reads the quota and asks
-- again. A bucket key of another type refuses the whole charge.

local payers = #KEYS - 1
local version, stop = expect_quota(KEYS[payers + 1], ARGV[1], 0)
if stop then
  return stop
end
local now = clock(ARGV[payers + 5])
local drawn_under = ARGV[2] + 0
local left = ARGV[3] + 0
local interval = ARGV[4] + 0

local raw, wrong = buckets_or_stray(KEYS, payers)
if wrong then
  return wrong
end
local borns = {}
for i = 1, payers do
  local born = redis.pcall('GET', KEYS[i] .. ':born')
  if type(born) == 'table' and born.err then
    return redis.error_reply('NOTABUCKET ' .. KEYS[i] .. ':born holds another type: ' .. born.err)
  end
  born = born and tonumber(born) or (born and math.huge) or 0
  if born ~= born or born % 1 ~= 0 then
    born = math.huge
  end
  borns[i] = born
end

local reply = { 1, version }
for i = 1, payers do
  local capacity = ARGV[4 + i] + 0
  local taken = 0
  if left > 0 and borns[i] <= drawn_under then
    -- A missing key is a full bucket; a string that is not a time, an
    -- empty one (as draw.lua reads it).
    local tat = now
    if raw[i] then
      tat = as_time(raw[i]) or now + capacity
    end
    local from = math.max(tat, now)
    local limit = now + 2 * capacity
    if limit > from then
      local room = (limit - from - (limit - from) % interval) / interval
      taken = math.min(left, room)
      if taken > 0 then
        store(KEYS[i], from + taken * interval, now)
        left = left - taken
      end
    end
  end
  reply[2 + i] = taken
end
return reply
