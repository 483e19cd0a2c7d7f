-- shuffle-limiter: a lease renewed, or found lost.
--
-- This is `renew` of src/inflight/lease/model.rs.
--
-- KEYS[j]      the pools the lease holds seats of (j = 1..m).
-- ARGV[1]      the lease's time to live, in microseconds.
-- ARGV[1 + j]  its member in KEYS[j], "<token>:<seats>".
-- ARGV[m + 2]  absent in production (the server's clock); the test's time.
--
-- Only the lease's own members are touched: another token's never. When
-- any of them is gone or has expired, the lease is lost: its other members
-- are removed (their seats may already be counted free by an acquire that
-- reaped the first) and the reply is { 0 }. Otherwise every member's expiry
-- moves to now + ttl: { 1, expiry }.

local m = #KEYS
local ttl = ARGV[1] + 0
local now = clock(ARGV[m + 2])
local lost = false
for j = 1, m do
  local score = redis.pcall('ZSCORE', KEYS[j], ARGV[1 + j])
  if type(score) == 'table' and score.err then
    return not_a_pool(KEYS[j], 'holds another type: ' .. score.err)
  end
  if not score or tonumber(score) <= now then
    lost = true
  end
end
if lost then
  for j = 1, m do
    redis.call('ZREM', KEYS[j], ARGV[1 + j])
  end
  return { 0 }
end
local expiry = now + ttl
for j = 1, m do
  redis.call('ZADD', KEYS[j], 'XX', expiry, ARGV[1 + j])
  keep(KEYS[j], ttl)
end
return { 1, expiry }
