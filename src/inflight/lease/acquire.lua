-- shuffle-limiter: an acquire of an in-flight limit over Redis: seats of a
-- tenant's pools, all or nothing, as a lease: its own pools first, then its
-- spill pools above their reserve, each group the roomiest first.
--
-- This is `acquire` of src/inflight/lease/model.rs; the differential test
-- in src/inflight/lease/tests.rs feeds both the same inputs.
--
-- KEYS[j]          the tenant's own pools (j = 1..k), then its spill pools
--                  (j = k + 1..k + d), in shard order.
-- KEYS[k + d + 1]  the limit's token counter, "{name}:lease".
-- KEYS[k + d + 2]  this acquire's record, "{name}:acq:<id>", with an id
--                  its caller chose, unique across the fleet (abandon.lua).
-- ARGV[1]          the lease's time to live, in microseconds.
-- ARGV[2]          the seats asked for.
-- ARGV[3]          the shard position ties are settled from (0-based).
-- ARGV[4]          d: how many of the keys are spill pools (0: no borrowing).
-- ARGV[4 + j]      the share of C that KEYS[j] holds (j = 1..k + d).
-- ARGV[4 + k + d + i]  the reserve of spill pool i (i = 1..d): the seats
--                  a borrower leaves free for its owners.
-- ARGV[5 + k + 2d] how long the record lives, in milliseconds.
-- ARGV[6 + k + 2d] absent in production (the server's clock); the test's time.
--
-- Reply: { 1, token, expiry, j, seats, j, seats, ... } with each pool's
-- 0-based position among the keys (k and above: borrowed) and the seats
-- taken of it, in the order taken; or { 0, free_in } when the pools do not
-- have the seats free together, with the microseconds until the earliest
-- expiry of a lease in them (-1 when none holds any): the holder's release
-- may come sooner; or { 2 }, "ran already" (below).
--
-- When it grants, the record holds the lease's token, so that a caller
-- that gave up without the reply can give the lease back. When the record
-- is there already, this acquire takes nothing and reads nothing:
-- - A tombstone (or anything but a token): the caller gave up before this
--   ran (abandon.lua left it). The answer, { 0, -1 }, is a refusal nobody
--   hears.
-- - A token: this acquire ran already and leased it, and this is the same
--   command sent again (a client that resends a command whose connection
--   dropped before the reply, as redis-rs's cluster client does). The
--   answer { 2 } is no answer to the caller: it gives the acquire back
--   (abandon.lua removes that lease) and hears "busy", as if the pools
--   were full. Replaying the lease instead would have to rebuild it from
--   the pools, which may have changed since.

local d = ARGV[4] + 0
local k = #KEYS - 2 - d
local ttl = ARGV[1] + 0
local seats = ARGV[2] + 0
local start = ARGV[3] + 0
local record = KEYS[k + d + 2]
local now = clock(ARGV[6 + k + 2 * d])
local recorded = redis.pcall('GET', record)
if type(recorded) == 'string' and string.match(recorded, '^%d+$') then
  return { 2 }
end
if recorded then
  return { 0, -1 }
end

-- free[j]: the seats KEYS[j] can give this acquire (above the reserve of
-- a spill pool).
local free, sum, earliest = {}, 0, -1
for j = 1, k + d do
  local share = ARGV[4 + j] + 0
  local floor = 0
  if j > k then
    floor = ARGV[4 + d + j] + 0
  end
  local used, bad, first = in_use(KEYS[j], share, now)
  if bad then
    return bad
  end
  free[j] = 0
  if used + floor < share then
    free[j] = share - used - floor
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

-- The counter, read before it is written: the last token given, a string
-- of digits below 2^53 - 1 (so that the next token is exact in a double),
-- or missing. The next token is the server's clock in microseconds, or the
-- last token + 1 when that is more: unique and growing while the counter
-- lasts, and past every token given before when the counter was lost (a
-- server restarted without its data, the key evicted) or came back older
-- (a restart from a snapshot, a failover to a replica that lagged): the
-- clock ran on through the downtime, while each token was at most the
-- clock when it was given (no two acquires run in the same microsecond).
-- This assumes a server clock that does not go back across a restart or
-- a failover (the new primary's clock not behind the old one's by more
-- than the downtime). Counting on from an older counter would give a new
-- lease the token, and so the member name, of one a process still holds,
-- renews and releases.
local counter = KEYS[k + d + 1]
local last = redis.pcall('GET', counter)
if type(last) == 'table' and last.err then
  return not_a_pool(counter, 'is not a token counter: ' .. last.err)
end
if last and not (string.match(last, '^%d+$') and tonumber(last) < 9007199254740991) then
  return not_a_pool(counter, 'is not a token counter below 2^53: ' .. shown(last))
end
local counted = now
if last and tonumber(last) + 1 > counted then
  counted = tonumber(last) + 1
end
redis.call('SET', counter, string.format('%d', counted))
redis.call('SET', record, string.format('%d', counted), 'PX', ARGV[5 + k + 2 * d])
local expiry = now + ttl
local reply = { 1, counted, expiry }
local need, tried = seats, {}
-- The own pools (first = 1, size k), then the spill pools (first = k + 1,
-- size d), each the roomiest first.
for _, group in ipairs({ { 1, k }, { k + 1, d } }) do
  local first, size = group[1], group[2]
  while need > 0 do
    -- The roomiest pool of the group not taken from yet, ties to the first
    -- at or after `start`, wrapping.
    local best, most = nil, 0
    for step = 0, size - 1 do
      local j = first + (start + step) % size
      if not tried[j] and free[j] > most then
        best, most = j, free[j]
      end
    end
    if not best then
      break
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
end
return reply
