-- shuffle-limiter: what the scripts that give tokens back share (refund.lua,
-- giveback.lua), after the prelude.

-- `unheld` of src/draw/rescale.rs: where a give-back that would move the
-- bucket `key` from `tat` to `back` leaves it while a hold-off holds it (its
-- instant in the hash `held_key`, as holdoff.lua writes it): no earlier than
-- the hold-off left it (one token at the instant), and never later than
-- `tat`. Without a hash, or with a value there of another type or that is
-- not a time, nothing is held.
local function unheld(tat, back, held_key, key, capacity, interval, now)
  local held = held_key and redis.pcall('HGET', held_key, key)
  held = type(held) == 'string' and as_time(held)
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
