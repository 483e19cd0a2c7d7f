-- shuffle-limiter: one retry withdrawn from a shard's retry budget.
--
-- `RetryBudget::withdraw` of src/upstream/retry.rs (`deposited`, then
-- `roomiest`, else `floor_due` in shard order); the differential test in
-- src/redis/script/retry.rs feeds both the same steps.
--
-- KEYS[i]      the shard's retry keys, in shard order.
-- ARGV[1]      the cap, in thousandths.
-- ARGV[2]      microseconds between two floor retries of a bucket; 0: none.
-- ARGV[3]      what to try: 0 deposits then the floor, 1 deposits only, 2
--              the floor only (the spread layout asks each bucket apart).
-- ARGV[3 + i]  this process's deposits to KEYS[i] not yet sent, counted
--              first (a withdraw flushes the shard's own).
-- ARGV[m + 4]  absent in production (the server's clock); the test's time.
--
-- Reply: { 1, 1, i - 1 } for a retry from KEYS[i]'s deposits, { 1, 2, i - 1 }
-- from its floor, { 0, 0, 0 } for none.

local m = #KEYS
local cap = ARGV[1] + 0
local every = ARGV[2] + 0
local mode = ARGV[3] + 0
local held, due, wrong = banks(m, cap)
if wrong then
  return wrong
end
local changed = {}
for i = 1, m do
  local earned = ARGV[3 + i] + 0
  local after = deposited(held[i], earned, cap)
  changed[i] = after ~= held[i]
  held[i] = after
end
local function done(reply)
  for i = 1, m do
    if changed[i] then
      keep(KEYS[i], held[i], due[i])
    end
  end
  return reply
end

if mode ~= 2 then
  -- `roomiest`: the most deposits, the first of equals.
  local best = nil
  for i = 1, m do
    if held[i] >= RETRY and (not best or held[i] > held[best]) then
      best = i
    end
  end
  if best then
    held[best] = held[best] - RETRY
    changed[best] = true
    return done({ 1, 1, best - 1 })
  end
end
if mode ~= 1 and every > 0 then
  local now = clock(ARGV[m + 4])
  for i = 1, m do
    if due[i] <= now then
      due[i] = now + every
      changed[i] = true
      return done({ 1, 2, i - 1 })
    end
  end
end
return done({ 0, 0, 0 })
