-- shuffle-limiter: a booking given back by a waiter that gave up, on
-- the Redis server.
--
-- This is `give_back` of src/draw/rescale.rs for each bucket that paid, in
-- integer microseconds; the differential test in
-- src/redis/script/changes.rs feeds both the same inputs.
--
-- KEYS[i]      the keys of the buckets that paid the booking.
-- KEYS[m + 1]  the quota key, "{limiter-name}:quota".
-- ARGV[1]      the quota version the booking was made under.
-- ARGV[2i]     the arrival time the booking left KEYS[i] at.
-- ARGV[2i + 1] the credit, in microseconds, it took from KEYS[i].
-- ARGV[2m + 2] absent in production (the server's clock); the test's time.
--
-- Reply: { 1, version } once given back where nothing drew since, or
-- { 0, version } when the quota changed since: nothing is given back (the
-- change moved every bucket, so none is as the booking left it).

local payers = #KEYS - 1
local version, stop = expect_quota(KEYS[payers + 1], ARGV[1], 0)
if stop then
  return stop
end
local now = clock(ARGV[2 * payers + 2])

for i = 1, payers do
  local written = ARGV[2 * i] + 0
  if tonumber(redis.call('GET', KEYS[i])) == written then
    local back = written - ARGV[2 * i + 1]
    if back < now then
      back = now
    end
    store(KEYS[i], back, now)
  end
end
return { 1, version }
