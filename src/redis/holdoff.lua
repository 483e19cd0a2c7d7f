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
-- ARGV[4]      '1' to record the instant in KEYS[m + 2], the limiter's
--              hold-offs "{limiter-name}:held" (a hash: each bucket key to
--              the latest instant it was held until, in µs), so that every
--              process's waits learn which booked slots it covers and book
--              those again (and keep the others); empty in the spread
--              layout, which has no such key.
-- ARGV[4 + i]  the capacity of KEYS[i], in microseconds.
-- ARGV[4 + m + i]  how long after the instant KEYS[i] comes back, in
--              microseconds: the held buckets come back one after another,
--              as in process (`hold_off` of src/store/memory/change.rs).
-- ARGV[2m + 5] absent in production (the server's clock); the test's time.
--
-- A bucket key of another type fails the hold-off with NOTABUCKET, and a
-- hold-offs key that is not a hash with NOTAHOLD, before anything is
-- written.
--
-- Reply: { 1, version, until } once held (the quota's version, which a
-- hold-off leaves as it is, and the instant held until, in µs), or { 0,
-- version } when the key holds another version than ARGV[1]: nothing was
-- held, and the caller reads the quota and asks again.

local record = ARGV[4] == '1'
local held = #KEYS - 1
if record then
  held = #KEYS - 2
  local kind = redis.call('TYPE', KEYS[held + 2]).ok
  if kind ~= 'hash' and kind ~= 'none' then
    return redis.error_reply('NOTAHOLD ' .. KEYS[held + 2] .. ': a ' .. kind .. ', not a hash')
  end
end
local version, stop = expect_quota(KEYS[held + 1], ARGV[1], 0)
if stop then
  return stop
end
local now = clock(ARGV[2 * held + 5])
local interval = ARGV[3] + 0
local until_now = now + ARGV[2]
if until_now > MAX_NOW then
  until_now = MAX_NOW
end

local raw, wrong = buckets_or_stray(KEYS, held)
if wrong then
  return wrong
end
-- Each bucket's own instant: the instant, and its turn after it.
local at, latest = {}, until_now
for i = 1, held do
  at[i] = until_now + ARGV[4 + held + i]
  if at[i] > MAX_NOW then
    at[i] = MAX_NOW
  end
  if at[i] > latest then
    latest = at[i]
  end
end
for i = 1, held do
  local capacity = ARGV[4 + i] + 0
  -- A missing key is a full bucket; a string that is not a time, an empty
  -- one (as draw.lua reads it).
  local tat = now
  if raw[i] then
    tat = as_time(raw[i]) or now + capacity
  end
  -- `hold` of src/draw/rescale.rs.
  local until_tat = at[i] + capacity - interval
  if until_tat > tat then
    store(KEYS[i], until_tat, now)
  end
end
if record then
  local key = KEYS[held + 2]
  for i = 1, held do
    -- A value that is not an instant a hold-off writes is overwritten (as
    -- a bucket's that is not a time is).
    local before = held_at(redis.call('HGET', key, KEYS[i]), now)
    if not before or before < at[i] then
      redis.call('HSET', key, KEYS[i], string.format('%d', at[i]))
    end
  end
  -- Kept a second past the latest instant in it, as a bucket key is.
  local ttl = (latest - now - (latest - now) % 1000) / 1000 + 1001
  if redis.call('PTTL', key) < ttl then
    redis.call('PEXPIRE', key, ttl)
  end
end
return { 1, version, until_now }
