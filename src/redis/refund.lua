-- shuffle-limiter: tokens given back to the buckets that paid a grant, on
-- the Redis server.
--
-- This is `refund` of src/draw/rescale.rs for each bucket, in integer
-- microseconds; the differential test in src/redis/script/changes.rs feeds
-- both the same inputs.
--
-- KEYS[i]      the keys of the buckets to pay back.
-- KEYS[m + 1]  the quota key, "{limiter-name}:quota".
-- ARGV[1]      the quota version the credits were counted in.
-- ARGV[2i]     the credit, in microseconds, to give back to KEYS[i].
-- ARGV[2i + 1] the capacity of KEYS[i], in microseconds: a bucket owing
--              more has reservations waiting on all of it, and gets nothing.
-- ARGV[2m + 2] absent in production (the server's clock); the test's time.
--
-- Reply: { 1, version } once given back, or { 0, version } when the key
-- holds another version than ARGV[1]: nothing is given back, and the caller
-- reads the quota and asks again.

local payers = #KEYS - 1
local version, stop = expect_quota(KEYS[payers + 1], ARGV[1], 0)
if stop then
  return stop
end
local now = clock(ARGV[2 * payers + 2])

for i = 1, payers do
  -- A missing key is a full bucket, and a full one takes nothing back; a
  -- string that is not a time is left for draw.lua to repair.
  local tat = tonumber(redis.call('GET', KEYS[i]))
  if tat and tat == tat and tat % 1 == 0 and tat > now and tat < 9007199254740992
    and tat - now <= ARGV[2 * i + 1] + 0 then
    local back = tat - ARGV[2 * i]
    if back < now then
      back = now
    end
    store(KEYS[i], back, now)
  end
end
return { 1, version }
