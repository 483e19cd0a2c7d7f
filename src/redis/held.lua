-- shuffle-limiter: what the scripts that read the hold-offs hash share
-- (refund.lua, giveback.lua, holdoff.lua, catchup.lua), after the prelude.

-- The longest hold-off, in microseconds: `MAX_HOLD_OFF` of
-- src/upstream/mod.rs (an hour), which every hold-off is cut to.
local MAX_HOLD = 3600000000

-- The instant `value` of the hold-offs hash says a bucket is held until,
-- read at `now`: nil when it is not what a hold-off writes, digits alone
-- (as the Rust side reads the hash too), or is later than any hold-off
-- writes: `now` plus the longest hold-off, plus the bucket's turn after
-- the instant, which is at most as long again (whatever the quota since).
-- Such a stray value would keep every wait's slot for ever.
local function held_at(value, now)
  local at = type(value) == 'string' and value:find('^%d+$') and as_time(value)
  if not at or at > now + 2 * MAX_HOLD then
    return nil
  end
  return at
end

-- `unheld` of src/draw/rescale.rs: where a give-back that would move the
-- bucket `key` from `tat` to `back` leaves it while a hold-off holds it (its
-- instant in the hash `held_key`, as holdoff.lua writes it): no earlier than
-- the hold-off left it (one token at the instant), and never later than
-- `tat`. Without a hash, or with a value there of another type or that is
-- not an instant a hold-off writes (`held_at`), nothing is held.
local function unheld(tat, back, held_key, key, capacity, interval, now)
  local held = held_key and held_at(redis.pcall('HGET', held_key, key), now)
  if not held or held <= now then
    return back
  end
  local floor = held + capacity - interval
  if floor > tat then
    floor = tat
  end
  if back < floor then
    return floor
  end
  return back
end
