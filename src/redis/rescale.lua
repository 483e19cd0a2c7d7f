-- shuffle-limiter: the quota of a running limiter changed, on the Redis
-- server, for every bucket at once.
--
-- This is `rescale` of src/draw/rescale.rs for each bucket, in integer
-- microseconds; the differential test in src/redis/script/changes.rs feeds
-- both the same inputs.
--
-- KEYS[i]      every bucket key of the limiter, "{limiter-name}:b<i - 1>".
-- KEYS[N + 1]  the quota key, "{limiter-name}:quota".
-- ARGV[1]      the quota version the old split comes from (0: none was set).
-- ARGV[2..4]   the old split: interval (us), burst, buckets holding one more.
-- ARGV[5..7]   the new split, the same way.
-- ARGV[8]      the new quota, "<count> <period in ns> <burst>".
-- ARGV[9]      absent in production (the server's clock); the test's time.
--
-- Reply: { 1, version } with the quota's new version once every bucket is
-- moved, or { 0, version } when the key holds another version than
-- ARGV[1]: nothing changed, and the caller reads the quota and asks again.

local buckets = #KEYS - 1
local version, stop = expect_quota(KEYS[buckets + 1], ARGV[1], 0)
if stop then
  return stop
end
local now = clock(ARGV[9])

-- floor(a * b / c) for integers with a <= c and b, c below 2^51, exactly:
-- the product may not fit in a double, so b is taken one bit at a time,
-- highest first, keeping a * (b's bits so far) = q * c + r with r < c.
local function mul_div(a, b, c)
  local bit = 1
  while bit * 2 <= b do
    bit = bit * 2
  end
  local q, r = 0, 0
  while bit >= 1 do
    q, r = q * 2, r * 2
    if r >= c then
      q, r = q + 1, r - c
    end
    if b >= bit then
      b = b - bit
      r = r + a
      if r >= c then
        q, r = q + 1, r - c
      end
    end
    bit = bit / 2
  end
  return q
end

local old_interval, old_burst, old_larger = ARGV[2] + 0, ARGV[3] + 0, ARGV[4] + 0
local new_interval, new_burst, new_larger = ARGV[5] + 0, ARGV[6] + 0, ARGV[7] + 0
local raw = redis.call('MGET', unpack(KEYS, 1, buckets))
for i = 1, buckets do
  -- Split::burst_of: the first `larger` buckets hold one token more.
  local old = old_burst * old_interval
  if i <= old_larger then
    old = old + old_interval
  end
  local new = new_burst * new_interval
  if i <= new_larger then
    new = new + new_interval
  end
  -- A missing key is a full bucket; a string that is not a time, an empty
  -- one (as draw.lua reads it).
  local tat = 0
  if raw[i] then
    tat = tonumber(raw[i])
    if not tat or tat ~= tat or tat < 0 or tat >= 9007199254740992 or tat % 1 ~= 0 then
      tat = now + old
    end
  end
  if tat - now > old then
    -- Owing beyond its capacity (reservations): still owed, in time, and
    -- empty until then.
    store(KEYS[i], tat - old + new, now)
  else
    -- Pace::room, then the share of it kept, rounded down.
    local room = old
    if tat > now then
      room = old - (tat - now)
    end
    store(KEYS[i], now + (new - mul_div(room, new, old)), now)
  end
end
redis.call('SET', KEYS[buckets + 1], string.format('%d', version + 1) .. ' ' .. ARGV[8])
return { 1, version + 1 }
