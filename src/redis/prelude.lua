-- shuffle-limiter: what every script of the limiter starts with. The Rust
-- side puts this file before each script (draw, state, rescale, refund,
-- giveback, holdoff and charge).

-- The latest time the scripts count, in microseconds: 2^53 - 2^50 - 1 (the
-- year 2255), so that a time plus a bucket's capacity (at most 2^50 us, as
-- the Rust side checks) stays an integer that a double holds exactly.
local MAX_NOW = 7881299347898367

-- The time to decide at, in microseconds: `sent` when the differential test
-- sends one, otherwise the server's clock (TIME); never past MAX_NOW.
local function clock(sent)
  local now
  if sent then
    now = sent + 0
  else
    local time = redis.call('TIME')
    now = time[1] * 1000000 + time[2]
  end
  if now > MAX_NOW then
    now = MAX_NOW
  end
  return now
end

-- A stray value as an error reply can show it: at most 64 bytes, each
-- outside printable ASCII as '?' (a reply the client cannot read as text
-- would fail as a generic error, which counts as an outage).
local function shown(value)
  return (string.gsub(string.sub(value, 1, 64), '[^%w%p ]', '?'))
end

-- The version of the quota set live in `key`, "<version> <count> <period in
-- ns> <burst> <N>" (see src/redis/quota.rs): 0 while the key is missing, and an
-- error reply as the second value when it holds something else: another
-- type (data, not an outage: the caller denies), or a version of 2^53 or
-- more, which a double cannot compare exactly (so two processes could each
-- take it for their own; src/redis/quota.rs refuses the same).
local function quota_version(key)
  local quota = redis.pcall('GET', key)
  if type(quota) == 'table' and quota.err then
    return 0, redis.error_reply('NOTAQUOTA ' .. key .. ' another type: ' .. quota.err)
  end
  if not quota then
    return 0
  end
  -- The whole shape, as src/redis/quota.rs reads it; version 0 is the
  -- quota built with, which no key holds (a change writes 1 or more: the
  -- server's clock in microseconds, see rescale.lua).
  local digits = string.match(quota, '^(%d+) %d+ %d+ %d+ %d+$')
  local version = digits and tonumber(digits)
  if not version or version == 0 then
    return 0, redis.error_reply('NOTAQUOTA ' .. key .. ' ' .. shown(quota))
  end
  if version >= 9007199254740992 then
    return 0, redis.error_reply('NOTAQUOTA ' .. key .. ' ' .. shown(quota) .. ', a version of 2^53 or more')
  end
  return version
end

-- The quota version in `key` when it is `expected`; otherwise, as the second
-- value, what the script answers instead of doing anything: { stale,
-- version }, or the error reply of a key that holds something else.
local function expect_quota(key, expected, stale)
  local version, bad = quota_version(key)
  if bad then
    return version, bad
  end
  if version ~= expected + 0 then
    return version, { stale, version }
  end
  return version
end

-- Writes a bucket's arrival time: the key lives until the bucket is full
-- again, plus a second (a missing key reads as a full bucket, which by then
-- it is). `clock_now` is the clock's reading, never a booking's later
-- instant: a key booked seconds ahead must outlive them all. '%d' because
-- Lua prints a number with 14 significant digits.
local function store(key, tat, clock_now)
  local ttl = tat - clock_now
  if ttl < 0 then
    ttl = 0
  end
  redis.call('SET', key, string.format('%d', tat), 'PX', (ttl - ttl % 1000) / 1000 + 1001)
end

-- A bucket key's value as its arrival time, or nil when it is not one (not
-- a number, NaN, negative, fractional, or beyond 2^53, where a double stops
-- holding every integer): each script reads such a bucket as empty.
local function as_time(value)
  local tat = tonumber(value)
  if not tat or tat ~= tat or tat < 0 or tat >= 9007199254740992 or tat % 1 ~= 0 then
    return nil
  end
  return tat
end

-- For a bucket key that MGET answered nil: the NOTABUCKET error reply when
-- the key holds another type (MGET answers nil for it and for a missing
-- key alike; GET tells them apart), nil when it is missing (a full bucket).
local function not_a_bucket(key)
  local got = redis.pcall('GET', key)
  if type(got) == 'table' and got.err then
    return redis.error_reply('NOTABUCKET ' .. key .. ' holds another type: ' .. got.err)
  end
  return nil
end

-- The values of keys[1..m], as MGET answers them (false for a missing key),
-- in slices: Lua's unpack cannot pass more than a few thousand values, and
-- N may be up to 2^16. The keys are an argument, not the global KEYS, which
-- a function of a library (see script.rs) does not have.
local function mget_all(keys, m)
  local all = {}
  for first = 1, m, 1000 do
    local last = first + 999
    if last > m then
      last = m
    end
    local raw = redis.call('MGET', unpack(keys, first, last))
    for j = first, last do
      all[j] = raw[j - first + 1]
    end
  end
  return all
end

-- The values of keys[1..m] (as mget_all reads them), or nil and the
-- NOTABUCKET error reply when one of them holds another type: MGET answers
-- nil for such a key as for a missing one, and it is someone else's data,
-- which a script's SET or DEL would destroy, so the script refuses before
-- it writes anything.
local function buckets_or_stray(keys, m)
  local raw = mget_all(keys, m)
  for i = 1, m do
    if not raw[i] then
      local wrong = not_a_bucket(keys[i])
      if wrong then
        return nil, wrong
      end
    end
  end
  return raw
end
