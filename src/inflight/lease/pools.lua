-- shuffle-limiter: what the lease scripts share, after the prelude.
--
-- A pool of an in-flight limit is a sorted set: one member per lease that
-- holds seats of it, "<token>:<seats>", scored with the lease's expiry in
-- microseconds of the server's clock. A member of another shape, or a key
-- of another type, is someone else's data: the scripts refuse it with
-- NOTAPOOL before they write anything.

-- The largest seats one member may hold: 2^32 - 1, as the Rust side counts.
local MAX_SEATS = 4294967295

-- The NOTAPOOL error reply for `key`.
local function not_a_pool(key, what)
  return redis.error_reply('NOTAPOOL ' .. key .. ' ' .. what)
end

-- A member's token and seats, or nil when it is not "<token>:<seats>".
local function lease_of(member)
  local token, seats = string.match(member, '^(%d+):(%d+)$')
  seats = seats and tonumber(seats)
  if not seats or seats < 1 or seats > MAX_SEATS then
    return nil
  end
  return token, seats
end

-- Drops the leases of `key` that expired at or before `now`, then reads
-- what the others hold: the seats in use (counted over the first share + 1
-- members only, since each holds a seat or more: past that the pool is full
-- whatever the rest hold) and the earliest expiry (nil when none). Or nil
-- and the error reply of a key that is not a pool.
local function in_use(key, share, now)
  local reaped = redis.pcall('ZREMRANGEBYSCORE', key, '-inf', now)
  if type(reaped) == 'table' and reaped.err then
    return nil, not_a_pool(key, 'holds another type: ' .. reaped.err)
  end
  local raw = redis.call('ZRANGE', key, 0, share, 'WITHSCORES')
  local used = 0
  for i = 1, #raw, 2 do
    local token, seats = lease_of(raw[i])
    if not token then
      return nil, not_a_pool(key, 'holds the member ' .. shown(raw[i]))
    end
    used = used + seats
  end
  local earliest = nil
  if #raw > 0 then
    earliest = tonumber(raw[2])
  end
  return used, nil, earliest
end

-- Keeps `key` alive as long as a lease of `ttl` us from now, and a second
-- more: a pool nobody holds leaves nothing behind.
local function keep(key, ttl)
  local ms = (ttl - ttl % 1000) / 1000 + 1001
  if redis.call('PTTL', key) < ms then
    redis.call('PEXPIRE', key, ms)
  end
end
