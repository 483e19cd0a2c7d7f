-- shuffle-limiter: one decision for one tenant, on the Redis server.
--
-- The same draw as ShardedLimiter::draw and ::denial in src/limiter.rs, with
-- the GCRA of src/gcra.rs (Cell::room, tokens, decide), in integer
-- microseconds instead of nanoseconds. Every value stays an integer below
-- 2^53, so Lua's doubles hold it exactly (the Rust side refuses
-- configurations where a bucket's capacity exceeds 2^50 us).
--
-- KEYS[j]     the tenant's bucket keys, "{limiter-name}:b<i>", in shard order.
--             A bucket is a string key holding its theoretical arrival time
--             (tat) in microseconds; a missing key is a full bucket (tat = 0).
-- ARGV[1]     interval: microseconds between two tokens of one bucket.
-- ARGV[2]     n: tokens asked for.
-- ARGV[3]     start: 0-based index into KEYS where the scan begins; the Rust
--             side draws it at random, so ties between buckets with equal
--             room favour none of them.
-- ARGV[3 + j] the burst (tokens when full) of KEYS[j].
-- ARGV[4 + k] absent in production, where the script reads the server's
--             clock (TIME); tests send a time in microseconds to replay a
--             sequence of requests.
--
-- Reply: { granted (1 or 0), j (0-based index into KEYS of the bucket that
-- paid, or that has room first), retry_after in microseconds (0 on a grant),
-- remaining (tokens left over the tenant's buckets after a grant, 0 on a
-- denial) }.
--
-- Redis 5 and later replicate a script's effects, so it may write after TIME.
-- The script runs for every decision, so it spares the interpreter: one
-- pass, no closures, and plain arithmetic (Lua turns a numeric string into a
-- number where arithmetic needs one) where a library call would do the same.

local interval = ARGV[1] + 0
local n = ARGV[2] + 0
local cost = n * interval
local start = ARGV[3] + 0
local k = #KEYS

local now = ARGV[4 + k]
if now then
  now = now + 0
else
  local time = redis.call('TIME')
  now = time[1] * 1000000 + time[2]
end

local tats = redis.call('MGET', unpack(KEYS))

-- One pass over the shard from `start`, wrapping around, as draw visits it:
-- - the roomiest bucket that fits the cost (room >= cost, strictly more room
--   than the best so far);
-- - every bucket's whole tokens;
-- - for ShardedLimiter::denial, the earliest `at` of the buckets that could
--   ever pay for the cost. denial scans in shard order with a strict <, so an
--   equal `at` goes to the lower shard position here.
local best, best_room, best_tat = nil, 0, 0
local soonest, soonest_at = 1, math.huge
local tokens = 0
for step = 0, k - 1 do
  local j = (start + step) % k + 1
  local tat = tats[j]
  if tat then
    tat = tonumber(tat)
    if not tat then
      return redis.error_reply('NOTABUCKET ' .. KEYS[j] .. ' holds a string that is not a time')
    end
  else
    -- MGET answers nil for a missing key and for a key of another type
    -- alike; GET tells them apart.
    local got = redis.pcall('GET', KEYS[j])
    if type(got) == 'table' and got.err then
      return redis.error_reply('NOTABUCKET ' .. KEYS[j] .. ' holds another type: ' .. got.err)
    end
    tat = 0
  end
  local capacity = ARGV[3 + j] * interval
  -- Cell::room: capacity - max(tat - now, 0), saturating at 0.
  local room = capacity
  if tat > now then
    room = capacity - (tat - now)
    if room < 0 then
      room = 0
    end
  end
  -- Cell::tokens: floor(room / interval), exact: `%` floors in Lua, and
  -- below 2^50 the double quotient never rounds across a whole number.
  tokens = tokens + (room - room % interval) / interval
  if room >= cost then
    if best == nil or room > best_room then
      best, best_room, best_tat = j, room, tat
    end
  elseif capacity >= cost then
    -- Cell::decide denies with at = new_tat - min(capacity, new_tat).
    local new_tat = math.max(tat, now) + cost
    local at = new_tat - math.min(capacity, new_tat)
    if at < soonest_at or (at == soonest_at and j < soonest) then
      soonest, soonest_at = j, at
    end
  end
end

if best == nil then
  return { 0, soonest - 1, math.max(soonest_at - now, 1), 0 }
end

-- Cell::decide grants (room >= cost is exactly when it does).
local new_tat = best_tat
if new_tat < now then
  new_tat = now
end
new_tat = new_tat + cost
-- The key lives until the bucket is full again, plus a second: a missing key
-- reads as a full bucket, which by then it is. The time needs '%d', as Lua
-- prints a number with 14 significant digits; the TTL in ms stays far below.
local ttl = new_tat - now
redis.call('SET', KEYS[best], string.format('%d', new_tat), 'PX',
  (ttl - ttl % 1000) / 1000 + 1001)
-- Grant::remaining sums Cell::tokens over the rooms after the grant; the
-- winner's room shrank by cost = n whole intervals, so its tokens by n.
return { 1, best - 1, 0, tokens - n }
