-- shuffle-limiter: an acquire of an in-flight limit over Redis: seats of a
-- tenant's pools, all or nothing, the roomiest first, as a lease.
--
-- This is `acquire` of src/inflight/lease/model.rs; the differential test
-- in src/inflight/lease/tests.rs feeds both the same inputs.
--
-- KEYS[j]      the tenant's pools, in shard order (j = 1..k).
-- KEYS[k + 1]  the limit's token counter, "{name}:lease".
-- ARGV[1]      the lease's time to live, in microseconds.
-- ARGV[2]      the seats asked for.
-- ARGV[3]      the shard position ties are settled from (0-based).
-- ARGV[3 + j]  the share of C that KEYS[j] holds.
-- ARGV[k + 4]  absent in production (the server's clock); the test's time.
--
-- Reply: { 1, token, expiry, j, seats, j, seats, ... } with each pool's
-- 0-based shard position and the seats taken of it, roomiest first; or
-- { 0, free_in } when the pools do not have the seats free together, with
-- the microseconds until the earliest expiry of a lease in them (-1 when
-- none holds any): the holder's release may come sooner.

local k = #KEYS - 1
local ttl = ARGV[1] + 0
local seats = ARGV[2] + 0
local start = ARGV[3] + 0
local now = clock(ARGV[k + 4])

local free, sum, earliest = {}, 0, -1
for j = 1, k do
  local share = ARGV[3 + j] + 0
  local used, bad, first = in_use(KEYS[j], share, now)
  if bad then
    return bad
  end
  free[j] = 0
  if used < share then
    free[j] = share - used
  end
  sum = sum + free[j]
  if first and (earliest < 0 or first < earliest) then
    earliest = first
  end
end
if sum < seats then
  if earliest >= 0 then
    earliest = earliest - now
  end
  return { 0, earliest }
end

-- The counter, read before it is written: a string of digits below 2^53 - 1
-- (so that the next token is exact in a double, and differs from every
-- token before it), or missing.
local last = redis.pcall('GET', KEYS[k + 1])
if type(last) == 'table' and last.err then
  return not_a_pool(KEYS[k + 1], 'is not a token counter: ' .. last.err)
end
if last and not (string.match(last, '^%d+$') and tonumber(last) < 9007199254740991) then
  return not_a_pool(KEYS[k + 1], 'is not a token counter below 2^53: ' .. shown(last))
end
local counted = redis.call('INCR', KEYS[k + 1])
local expiry = now + ttl
local reply = { 1, counted, expiry }
local need, tried = seats, {}
while need > 0 do
  -- The roomiest pool not taken from yet, ties to the first at or after
  -- `start`, wrapping.
  local best, most = nil, 0
  for step = 0, k - 1 do
    local j = (start + step) % k + 1
    if not tried[j] and free[j] > most then
      best, most = j, free[j]
    end
  end
  tried[best] = true
  local got = most
  if got > need then
    got = need
  end
  need = need - got
  redis.call('ZADD', KEYS[best], expiry, string.format('%d:%d', counted, got))
  keep(KEYS[best], ttl)
  reply[#reply + 1] = best - 1
  reply[#reply + 1] = got
end
return reply
