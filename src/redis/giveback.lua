-- shuffle-limiter: a booking given back by a waiter that gave up, on
-- the Redis server.
--
-- This is `give_back`, then `unheld`, of src/draw/rescale.rs for each
-- bucket that paid, in integer microseconds; the differential test in
-- src/redis/script/changes.rs feeds both the same inputs. The Rust side
-- puts prelude.lua and held.lua before it.
--
-- KEYS[i]      the keys of the buckets that paid the booking.
-- KEYS[m + 1]  the quota key, "{limiter-name}:quota".
-- KEYS[m + 2]  with ARGV[2] above 0: the hold-off hash, "{limiter-name}:held"
--              (holdoff.lua), the instant each bucket is held until.
-- ARGV[1]      the quota version the booking was made under.
-- ARGV[2]      the interval between two tokens of a bucket, in
--              microseconds, when KEYS[m + 2] is given; 0 when it is not.
-- ARGV[3i]     the arrival time the booking left KEYS[i] at.
-- ARGV[3i + 1] the credit, in microseconds, it took from KEYS[i].
-- ARGV[3i + 2] the capacity of KEYS[i], in microseconds.
-- ARGV[3m + 3] absent in production (the server's clock); the test's time.
--
-- Reply: { 1, version } once given back where nothing drew since, or
-- { 0, version } when the quota changed since: nothing is given back (the
-- change moved every bucket, so none is as the booking left it).

local interval = ARGV[2] + 0
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
local now = clock(ARGV[3 * payers + 3])

for i = 1, payers do
  local written = ARGV[3 * i] + 0
  if tonumber(redis.call('GET', KEYS[i])) == written then
    local back = written - ARGV[3 * i + 1]
    if back < now then
      back = now
    end
    store(KEYS[i], unheld(written, back, held_key, KEYS[i], ARGV[3 * i + 2] + 0, interval, now), now)
  end
end
return { 1, version }
