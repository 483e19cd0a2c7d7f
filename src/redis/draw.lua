-- shuffle-limiter: one decision for one tenant, on the Redis server: the
-- function `draw`, which draw_one.lua calls once per script call and
-- draw_batch.lua once per decision of a batch, in arrival order. The
-- contract below is draw_one.lua's, one call's KEYS, and the numbers argv
-- it sends packed in ARGV[1] (see `unpacked`).
--
-- This is `draw` of src/draw/ (mod.rs, pool.rs, borrow.rs), line by line, in
-- integer microseconds instead of nanoseconds; the differential test in src/redis/script/differential.rs feeds
-- both the same inputs. Every value stays an integer below 2^53, so Lua's
-- doubles hold it exactly: the Rust side refuses a bucket capacity above
-- 2^50 us, and the clock reading is capped at 2^53 - 2^50 (the year 2255).
-- The Rust side puts prelude.lua (`clock`, `expect_quota`, `store`) before it.
--
-- KEYS[j]     the tenant's bucket keys, "{limiter-name}:b<i>": its k own
--             buckets in shard order, then its d spill buckets in rank
--             order. A bucket is a string key holding its theoretical
--             arrival time (tat) in microseconds; a missing key is a full
--             bucket (tat = 0).
-- argv[1]     interval: microseconds between two tokens of one bucket.
-- argv[2]     n: tokens asked for.
-- argv[3]     start: 0-based shard position from which a tie for the most
--             room is settled (drawn at random by the Rust side).
-- argv[4]     k: how many of the keys are the tenant's own.
-- argv[4 + j] the burst (tokens when full) of KEYS[j].
-- argv[4 + k + d + i]  the reserve of spill bucket i (KEYS[k + i]): the
--             credit, in microseconds, a borrower must leave in it
--             (`ShardShape::reserve_of`, worked out by the Rust side).
-- KEYS[k + d + 1]  the limiter's quota key, "{limiter-name}:quota" (see
--             quota.lua): absent until a quota is changed live, then
--             "<version> <count> <period in ns> <burst>".
-- KEYS[k + d + 2]  only when d > 0: the limiter's hold-offs,
--             "{limiter-name}:held" (see holdoff.lua): while a hold-off
--             holds every own bucket past the draw's instant, no spill
--             bucket lends (`held_off` of src/store/memory/change.rs).
-- argv[5 + k + 2d]  the quota version the caller's interval and bursts
--             come from (0: the quota it was built with). When the key
--             holds another, nothing is drawn: the reply is { -1, version },
--             and the caller reads the quota and asks again.
-- argv[6 + k + 2d]  lead: 0 for a decision now; for a booking, how
--             many microseconds from now the draw is made at (the grant is
--             the caller's from then on, and later requests line up behind
--             it).
-- argv[7 + k + 2d]  absent in production, where the script reads the
--             server's clock (TIME); the differential test sends a time in
--             microseconds.
--
-- Reply (draw_one.lua packs it, as its argv came): { granted (1 or 0), j
-- (0-based position of the bucket that paid, or that has room first), wait
-- (on a grant: microseconds until every own bucket, and the ones that paid,
-- are full again; on a denial: retry_after, at least 1), remaining (whole
-- tokens left over the own buckets after a grant; 0 on a denial) }, then
-- on a grant the tokens bucket j paid and
-- the arrival time it was left at, and for each further bucket paying with
-- it (in the order they pay) its position, its tokens and its arrival time;
-- on a denial the whole tokens each own bucket holds one microsecond before
-- the retry time, if nothing is taken.
--
-- A bucket key holding a string that is not a time (nan, inf, 1e300, -5,
-- 1.5, "x") is repaired: it is read, and written back, as an empty bucket,
-- which refills from now on; that can only ever cost grants. A key of
-- another type is an error (NOTABUCKET) that no write here could fix.
--
-- Redis 5 and later replicate a script's effects, so it may write after TIME.

-- The numbers a script call sends packed in `blob` as little-endian
-- doubles (`struct`), exact for integers below 2^53, which every value here
-- is: Redis turns each argument into an object of its own, and Lua each
-- text into a number, which together cost more than the draw itself.
-- `formats` keeps the `struct` format of n doubles, made once each.
local formats = {}
local function doubles(n)
  local format = formats[n]
  if not format then
    format = '<' .. string.rep('d', n)
    formats[n] = format
  end
  return format
end

-- The `count` numbers packed in `blob` from byte `at` on, as a table, and
-- the byte after them.
local function unpacked(blob, at, count)
  local numbers = { struct.unpack(doubles(count), blob, at) }
  local after = numbers[count + 1]
  numbers[count + 1] = nil
  return numbers, after
end

-- A batch names each bucket key by its position in KEYS (3 and on, see
-- draw_batch.lua), and `held` holds at that position the key's value as
-- MGET read it; below 3 it keeps the positions the batch wrote, in the
-- order first written, and the same as a set, the times its decisions
-- left in the keys they read or wrote (by position), and KEYS, for a key's
-- name. Numbers index it: Lua hashes no string for them.
local HELD_WRITTEN, HELD_WROTE, HELD_TIMES, HELD_KEYS = -1, 0, 1, 2

-- The name of the bucket key `key`: itself for a decision alone, its name
-- in KEYS for a batch's (a position).
local function key_name(held, key)
  if held then
    return held[HELD_KEYS][key]
  end
  return key
end

-- Pace::room at time t of the bucket at position j, and Pace::tokens of
-- it, floor(room / interval), exact: `%` floors in Lua. For the paths that
-- are not taken on every decision.
local function room_at(raw, argv, a, interval, j, t)
  local room = argv[a + 4 + j] * interval
  if raw[j] > t then
    room = room - (raw[j] - t)
    if room < 0 then
      room = 0
    end
  end
  return room
end
local function tokens_at(raw, argv, a, interval, j, t)
  local room = room_at(raw, argv, a, interval, j, t)
  return (room - room % interval) / interval
end

-- Writes a bucket's arrival time: at once (see `store`) for a decision
-- alone; in a batch into `held`, the values its next decisions read (`key`
-- a position), and each key written is stored once when the batch ends
-- (draw_batch.lua), which leaves every key as the batch's decisions one by
-- one would.
local function put(held, key, tat, clock_now)
  if not held then
    store(key, tat, clock_now)
    return
  end
  local wrote = held[HELD_WROTE]
  if not wrote[key] then
    wrote[key] = true
    local written = held[HELD_WRITTEN]
    written[#written + 1] = key
  end
  held[HELD_TIMES][key] = tat
end

-- The draw of one decision whose bucket keys are keys[kb + 1 .. kb + ranked]
-- and whose argv[i] above is argv[a + i], at the clock's reading
-- `clock_now`, once its quota version is known to be the caller's: the
-- reply above (the version check and the clock are the callers', in
-- draw_one.lua and draw_batch.lua). `held` is nil for a decision alone;
-- in a batch, what the batch read and its decisions so far left (above),
-- and the keys are positions in KEYS. `holds` is the key of the hold-offs
-- (KEYS[k + d + 2] above).
local function draw(keys, kb, ranked, argv, a, clock_now, held, holds)
  local interval = argv[a + 1] + 0
  local n = argv[a + 2] + 0
  local start = argv[a + 3] + 0
  local k = argv[a + 4] + 0
  local d = ranked - k
  -- A booking is the draw at a later instant: `lead` microseconds on.
  -- The keys' lifetimes count from the clock itself (see `store`).
  local now = clock_now + argv[a + 6 + ranked + d]
  if now > MAX_NOW then
    now = MAX_NOW
  end

  -- Every bucket is first read (the in-process store's atomic load) and kept
  -- in MGET's reply as a number. The script runs for every decision, so it
  -- spares the interpreter: no closures, no tables beyond MGET's reply,
  -- comparisons instead of math.* calls.
  local raw, times
  if held then
    raw, times = {}, held[HELD_TIMES]
    for j = 1, ranked do
      raw[j] = held[keys[kb + j]]
    end
  else
    raw = redis.call('MGET', unpack(keys, kb + 1, kb + ranked))
  end
  for j = 1, ranked do
    local tat = times and times[keys[kb + j]]
    if tat then
      -- Read as a time by the batch's decisions before: as they left it.
    elseif raw[j] then
      tat = as_time(raw[j])
      if not tat then
        -- Not a time: an empty bucket, written back so that it refills.
        tat = now + argv[a + 4 + j] * interval
        put(held, keys[kb + j], tat, clock_now)
      end
    else
      local wrong = not_a_bucket(key_name(held, keys[kb + j]))
      if wrong then
        return wrong
      end
      tat = 0
    end
    raw[j] = tat
    if times then
      times[keys[kb + j]] = tat
    end
  end

  -- `any` of src/draw/mod.rs: one pass over the own buckets in order, counted and
  -- compared exactly as there; a tie for the most room is settled from
  -- `start` only after the pass.

  local cost = n * interval
  local best, best_room, ties = 1, -1, 0
  local tokens, full_in = 0, 0
  for j = 1, k do
    local capacity = argv[a + 4 + j] * interval
    local tat = raw[j]
    -- Pace::room: capacity - max(tat - now, 0), never below 0.
    local room = capacity
    if tat > now then
      room = capacity - (tat - now)
      if room < 0 then
        room = 0
      end
      if tat - now > full_in then
        full_in = tat - now
      end
    end
    -- Pace::tokens: floor(room / interval), exact: `%` floors in Lua.
    tokens = tokens + (room - room % interval) / interval
    if room > best_room then
      best, best_room, ties = j, room, 1
    elseif room == best_room then
      ties = ties + 1
    end
  end
  local remaining = tokens - n
  if best_room < cost and tokens >= n then
    -- `short` of src/draw/pool.rs: no own bucket can pay alone, but their
    -- whole tokens add up to n: the roomiest pays all it holds, then the next
    -- roomiest, equal rooms in turn from `start`, until n is paid.
    local paying, paid, left = {}, {}, n
    while left > 0 do
      local payer, payer_room, payer_tokens = nil, 0, 0
      local j = start + 1
      for _ = 1, k do
        -- Equal whole tokens are not equal rooms: the rooms are compared.
        local room = room_at(raw, argv, a, interval, j, now)
        if not paying[j] and room >= interval and (payer == nil or room > payer_room) then
          payer, payer_room = j, room
        end
        if j == k then j = 1 else j = j + 1 end
      end
      if payer == nil then
        break
      end
      paying[payer] = true
      payer_tokens = (payer_room - payer_room % interval) / interval
      if payer_tokens > left then
        payer_tokens = left
      end
      left = left - payer_tokens
      local tat = raw[payer]
      if tat < now then
        tat = now
      end
      tat = tat + payer_tokens * interval
      put(held, keys[kb + payer], tat, clock_now)
      if tat - now > full_in then
        full_in = tat - now
      end
      paid[#paid + 1] = payer - 1
      paid[#paid + 1] = payer_tokens
      paid[#paid + 1] = tat
    end
    local reply = { 1, paid[1], full_in, remaining }
    for i = 2, #paid do
      reply[#reply + 1] = paid[i]
    end
    return reply
  end
  if best_room < cost then
    -- No own bucket can pay, not even together: `soonest` of
    -- src/draw/pool.rs, and `borrow` (src/draw/borrow.rs) when there are
    -- spill keys. The denial names when the request can first be paid, own
    -- buckets first; a spill bucket counts with its capacity less the
    -- reserve, and may pay from its room above the reserve.
    local soonest, soonest_at = 1, math.huge
    for j = 1, k do
      local capacity = argv[a + 4 + j] * interval
      if capacity >= cost then
        local at = raw[j]
        if at < now then
          at = now
        end
        at = at - (capacity - cost)
        if at < soonest_at then
          soonest, soonest_at = j, at
        end
      end
    end
    if n > 1 then
      -- The first instant the own buckets' whole tokens add up to n (the
      -- tokens at `now` do not): no later than one bucket alone, nor than
      -- all of them full, if they hold n then; found by halving.
      local full = now
      for j = 1, k do
        if raw[j] > full then
          full = raw[j]
        end
      end
      local function together(t)
        local sum = 0
        for j = 1, k do
          sum = sum + tokens_at(raw, argv, a, interval, j, t)
        end
        return sum
      end
      local high = soonest_at
      if together(full) >= n and full < high then
        high = full
      end
      if high ~= math.huge then
        local low = now
        while high - low > 1 do
          local half = high - low
          local mid = low + (half - half % 2) / 2
          if together(mid) >= n then
            high = mid
          else
            low = mid
          end
        end
        -- The bucket whose token completes them, the lowest if several.
        for j = 1, k do
          if tokens_at(raw, argv, a, interval, j, high) > tokens_at(raw, argv, a, interval, j, high - 1) then
            soonest = j
            break
          end
        end
        soonest_at = high
      end
    end
    best, best_room = nil, 0
    -- No spill bucket lends while a hold-off holds every own bucket past
    -- `now` (`ShardShape::lending` of src/draw/borrow.rs): the upstream
    -- said stop for this tenant (or for all). A hash
    -- of another type, or a value that no hold-off writes, holds nothing
    -- (`held_at` of held.lua).
    local lenders = ranked
    if ranked > k then
      local names = {}
      for j = 1, k do
        names[j] = key_name(held, keys[kb + j])
      end
      local instants = redis.pcall('HMGET', holds, unpack(names))
      if not instants.err then
        lenders = k
        for j = 1, k do
          local at = held_at(instants[j], now)
          if not at or at <= now then
            lenders = ranked
            break
          end
        end
      end
    end
    for j = k + 1, lenders do
      local lendable = argv[a + 4 + j] * interval - argv[a + 4 + ranked + j - k]
      local tat = raw[j]
      local above = lendable
      if tat > now then
        above = lendable - (tat - now)
        if above < 0 then
          above = 0
        end
      end
      if above >= cost then
        if best == nil or above > best_room then
          best, best_room = j, above
        end
      elseif lendable >= cost then
        local at = tat
        if at < now then
          at = now
        end
        at = at - (lendable - cost)
        if at < soonest_at then
          soonest, soonest_at = j, at
        end
      end
    end
    if best == nil then
      local retry = soonest_at - now
      if retry < 1 then
        retry = 1
      end
      -- And what each own bucket holds just before then, if nothing is taken
      -- meanwhile: no more than that until the retry time, whatever other
      -- processes do (the client's denial cache keeps it).
      local reply = { 0, soonest - 1, retry, 0 }
      for j = 1, k do
        reply[4 + j] = tokens_at(raw, argv, a, interval, j, soonest_at - 1)
      end
      return reply
    end
    -- Nothing was taken from the own buckets.
    remaining = tokens
  elseif ties > 1 then
    -- The first bucket with the most room at or after `start`, wrapping.
    local j = start + 1
    for _ = 1, k do
      local capacity = argv[a + 4 + j] * interval
      local room = capacity
      if raw[j] > now then
        room = capacity - (raw[j] - now)
        if room < 0 then
          room = 0
        end
      end
      if room == best_room then
        best = j
        break
      end
      if j == k then j = 1 else j = j + 1 end
    end
  end
  local tat = raw[best]
  if n > 0 then
    if tat < now then
      tat = now
    end
    tat = tat + cost
    -- The store's compare-and-swap: the script is atomic, so a SET.
    put(held, keys[kb + best], tat, clock_now)
  end
  if tat - now > full_in then
    full_in = tat - now
  end
  return { 1, best - 1, full_in, remaining, n, tat }
end
