-- shuffle-limiter: the quota or the number of buckets of a running limiter
-- changed, on the Redis server, for every bucket at once.
--
-- For each bucket this is `rescale` (a new quota: the share of the burst is
-- kept) or `resize` (a new N: the tokens are kept, up to the new burst) of
-- src/draw/rescale.rs, and the in-process store's `move_buckets`, in integer
-- microseconds; the differential test in src/redis/script/changes.rs feeds
-- both the same inputs.
--
-- KEYS[i]      the bucket keys "{limiter-name}:b<i - 1>", for every bucket
--              below the larger of the old and the new N.
-- KEYS[M + 1]  the quota key, "{limiter-name}:quota".
-- ARGV[1]      the quota version the old split comes from (0: none was set).
-- ARGV[2]      'share' (a new quota) or 'tokens' (a new N).
-- ARGV[3..6]   the old split: interval (us), burst, buckets holding one
--              more, N.
-- ARGV[7..10]  the new split, the same way.
-- ARGV[11]     the new quota, "<count> <period in ns> <burst> <N>".
-- ARGV[12]     absent in production (the server's clock); the test's time.
--
-- A bucket below both Ns is moved; one below the new N only is added,
-- empty, and "<key>:born" says the version that added it (kept while the
-- bucket is, with no expiry: a grant drawn before it, refunded however
-- late, must find it); one below the old N only is removed: its keys are
-- deleted, and no
-- draw can reach it, since every draw sends the quota version it decided
-- with and this script moves that version on.
--
-- A bucket key of another type (a hash, a list) fails the change with
-- NOTABUCKET before anything is written.
--
-- Reply: { 1, version } with the quota's new version once every bucket is
-- moved, or { 0, version } when the key holds another version than
-- ARGV[1]: nothing changed, and the caller reads the quota and asks again.

local keys = #KEYS - 1
local version, stop = expect_quota(KEYS[keys + 1], ARGV[1], 0)
if stop then
  return stop
end
local now = clock(ARGV[12])
-- The next version: one more, and no earlier than the clock's reading in
-- microseconds, so that a version is never written twice with two
-- meanings. A quota key lost (FLUSHALL, a restart without persistence, a
-- DEL) reads as version 0 again; "1" written then would be what a process
-- still holding the old version 1 decides with, under its old quota.
-- (This assumes a server clock that does not go back across the loss.)
local next_version = version + 1
if now > next_version then
  next_version = now
end
if next_version >= 9007199254740992 then
  -- The next version would be one no script can read exactly: refused as
  -- the scripts refuse such a key, before anything is moved.
  return redis.error_reply('NOTAQUOTA ' .. KEYS[keys + 1] .. ' ' .. version
    .. ', whose next version would be 2^53')
end

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

local share = ARGV[2] == 'share'
local old_interval, old_burst, old_larger, old_n = ARGV[3] + 0, ARGV[4] + 0, ARGV[5] + 0, ARGV[6] + 0
local new_interval, new_burst, new_larger, new_n = ARGV[7] + 0, ARGV[8] + 0, ARGV[9] + 0, ARGV[10] + 0

-- What a bucket holding `room` of its old capacity `old` keeps of its new
-- capacity `new`: the same share of it rounded down, or the same tokens at
-- the new interval, rounded down and no more than the new capacity.
local function kept(room, old, new)
  if share then
    return mul_div(room, new, old)
  end
  local rest = room % old_interval
  local tokens = (room - rest) / old_interval
  if tokens * new_interval >= new then
    return new
  end
  return math.min(tokens * new_interval + mul_div(rest, new_interval, old_interval), new)
end

-- A key of another type is refused before anything is written, as
-- draw.lua refuses it.
local raw, wrong = buckets_or_stray(KEYS, keys)
if wrong then
  return wrong
end
-- `added` of src/draw/rescale.rs: a bucket added is no fuller than the
-- fullest that stays (the lowest arrival time less capacity of those moved
-- before it, since they come first).
local fullest = math.huge
for i = 1, keys do
  -- Split::burst_of: the first `larger` buckets hold one token more.
  local old = old_burst * old_interval
  if i <= old_larger then
    old = old + old_interval
  end
  local new = new_burst * new_interval
  if i <= new_larger then
    new = new + new_interval
  end
  if i > new_n then
    redis.call('DEL', KEYS[i], KEYS[i] .. ':born')
  elseif i > old_n then
    local from = now
    if fullest > from then
      from = fullest
    end
    store(KEYS[i], from + new, now)
    -- Another bucket than any that had this key: refund.lua gives grants
    -- drawn before this version nothing.
    redis.call('SET', KEYS[i] .. ':born', string.format('%d', next_version))
  else
    -- A missing key is a full bucket; a string that is not a time, an
    -- empty one (as draw.lua reads it).
    local tat = 0
    if raw[i] then
      tat = as_time(raw[i]) or now + old
    end
    local moved
    if tat - now > old then
      -- Owing beyond its capacity (bookings): still owed, in time, and
      -- empty until then.
      moved = tat - old + new
    else
      -- Pace::room, then what of it is kept, rounded down.
      local room = old
      if tat > now then
        room = old - (tat - now)
      end
      moved = now + (new - kept(room, old, new))
    end
    store(KEYS[i], moved, now)
    if moved - new < fullest then
      fullest = moved - new
    end
  end
end
redis.call('SET', KEYS[keys + 1], string.format('%d', next_version) .. ' ' .. ARGV[11])
return { 1, next_version }
