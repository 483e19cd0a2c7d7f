-- shuffle-limiter: the upstream said stop: the buckets named grant no
-- whole token before an instant, on the Redis server.
--
-- This is `hold` of src/draw/rescale.rs for each bucket, in integer
-- microseconds; the differential test in src/redis/script/hold.rs feeds
-- both the same inputs.
--
-- KEYS[i]      the keys of the buckets to hold off.
-- KEYS[m + 1]  the quota key, "{limiter-name}:quota".
-- ARGV[1]      the quota version the capacities come from.
-- ARGV[2]      how long to hold off, in microseconds from the clock.
-- ARGV[3]      the buckets' interval, in microseconds.
-- ARGV[3 + i]  the capacity of KEYS[i], in microseconds.
-- ARGV[m + 4]  the quota, "<count> <period in ns> <burst> <N>", to store
--              again under the next version, so that every process decides
--              again and drops the slots its waits booked before; empty in
--              the spread layout, which sets no quota live.
-- ARGV[m + 5]  absent in production (the server's clock); the test's time.
--
-- A bucket key of another type fails the hold-off with NOTABUCKET before
-- anything is written.
--
-- Reply: { 1, version } once held (the quota's version now), or { 0,
-- version } when the key holds another version than ARGV[1]: nothing was
-- held, and the caller reads the quota and asks again.

local held = #KEYS - 1
local version, stop = expect_quota(KEYS[held + 1], ARGV[1], 0)
if stop then
  return stop
end
local bump = ARGV[held + 4] ~= ''
if bump and version + 1 >= 9007199254740992 then
  return redis.error_reply('NOTAQUOTA ' .. KEYS[held + 1] .. ': no version left after ' .. version)
end
local now = clock(ARGV[held + 5])
local interval = ARGV[3] + 0
local until_now = now + ARGV[2]
if until_now > MAX_NOW then
  until_now = MAX_NOW
end

local raw, wrong = buckets_or_stray(held)
if wrong then
  return wrong
end
for i = 1, held do
  local capacity = ARGV[3 + i] + 0
  -- A missing key is a full bucket; a string that is not a time, an empty
  -- one (as draw.lua reads it).
  local tat = now
  if raw[i] then
    tat = as_time(raw[i]) or now + capacity
  end
  local until_tat = until_now + capacity - interval
  if until_tat > tat then
    store(KEYS[i], until_tat, now)
  end
end
if bump then
  version = version + 1
  redis.call('SET', KEYS[held + 1], string.format('%d', version) .. ' ' .. ARGV[held + 4])
end
return { 1, version }
