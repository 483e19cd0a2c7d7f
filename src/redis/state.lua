-- shuffle-limiter: the state of some buckets, read on the Redis server
-- without writing anything.
--
-- Each bucket is read as draw.lua would read it at the same instant (no
-- lead): a missing key is a full bucket, a string that is not a time is an
-- empty one (draw.lua would repair it so; this script leaves it for the
-- draw to write), and a key of another type is an error (NOTABUCKET).
-- The Rust side puts prelude.lua (`clock`, `expect_quota`) before it.
--
-- KEYS[j]     the bucket keys to read, m of them.
-- KEYS[m + 1] the limiter's quota key (see draw.lua).
-- ARGV[1]     interval: microseconds between two tokens of one bucket.
-- ARGV[2]     the quota version the interval and bursts come from (0: the
--             quota built with). When the key holds another, nothing is
--             read: the reply is { -1, version }, and the caller reads the
--             quota and asks again.
-- ARGV[2 + j] the burst (tokens when full) of KEYS[j].
--
-- Reply: { 1, then for each key in order: microseconds until it is full
-- (0 when it is), whole tokens it could grant now }.

local interval = ARGV[1] + 0
local m = #KEYS - 1

local _, stop = expect_quota(KEYS[m + 1], ARGV[2], -1)
if stop then
  return stop
end
local now = clock(nil)

local reply = { 1 }
local raw = mget_all(KEYS, m)
for j = 1, m do
  local capacity = ARGV[2 + j] * interval
  local tat = raw[j]
  if tat then
    -- Not a time: the empty bucket draw.lua would write back.
    tat = as_time(tat) or now + capacity
  else
    local wrong = not_a_bucket(KEYS[j])
    if wrong then
      return wrong
    end
    tat = 0
  end
  -- Pace::room and Pace::tokens, as draw.lua counts them.
  local full_in, room = 0, capacity
  if tat > now then
    full_in = tat - now
    room = capacity - full_in
    if room < 0 then
      room = 0
    end
  end
  reply[#reply + 1] = full_in
  reply[#reply + 1] = (room - room % interval) / interval
end
return reply
