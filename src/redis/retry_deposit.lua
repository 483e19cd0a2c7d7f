-- shuffle-limiter: a process's deposits to the retry budget, batched.
--
-- `deposited` of src/upstream/retry.rs for each key; the differential test
-- in src/redis/script/retry.rs feeds both the same steps.
--
-- KEYS[i]      the retry keys of the buckets that earned.
-- ARGV[1]      the most thousandths a bucket holds (the cap).
-- ARGV[1 + i]  the thousandths KEYS[i] earned.
--
-- Reply: the thousandths each key holds after.

local m = #KEYS
local cap = ARGV[1] + 0
local held, due, wrong = banks(m, cap)
if wrong then
  return wrong
end
local reply = {}
for i = 1, m do
  local after = deposited(held[i], ARGV[1 + i] + 0, cap)
  keep(KEYS[i], after, due[i])
  reply[i] = after
end
return reply
