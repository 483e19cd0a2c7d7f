
-- Many decisions in one script call, applied in the order they come, each
-- exactly as draw_one.lua applies it alone: the same `draw`, at the same
-- clock reading for all (one TIME), and the same quota check, read once
-- since nothing in between changes it. The bucket keys are read once (one
-- MGET) and each key written is stored once, at the end, with what its last
-- decision left in it: what a read between two decisions would have given
-- the second, and the value and lifetime the last write would have left.
--
-- KEYS[1]     the limiter's quota key (draw.lua's last key).
-- KEYS[2..]   each decision's bucket keys in turn, as draw.lua's KEYS.
-- ARGV[1]     how many decisions.
-- ARGV[2]     "" in production, where the script reads the server's clock;
--             the differential test sends a time in microseconds.
-- then for each decision: its count of bucket keys (k + d), then its
-- ARGV[1 .. 6 + k + 2d] as draw.lua's (interval, n, start, k, bursts,
-- reserves, version, lead).
--
-- Reply: one element per decision, in order: what draw_one.lua would have
-- answered it ({ -1, version } for another quota's numbers, an error reply
-- for a key of another type).
local version, bad = quota_version(KEYS[1])
local sent = ARGV[2]
if sent == '' then
  sent = nil
end
local clock_now = clock(sent)
local held = { [HELD_WRITTEN] = {} }
if not bad then
  -- Each key once, in slices (Lua's unpack passes a few thousand values).
  local distinct = {}
  for i = 2, #KEYS do
    if held[KEYS[i]] == nil then
      held[KEYS[i]] = false
      distinct[#distinct + 1] = KEYS[i]
    end
  end
  for first = 1, #distinct, 1000 do
    local last = first + 999
    if last > #distinct then
      last = #distinct
    end
    local values = redis.call('MGET', unpack(distinct, first, last))
    for j = first, last do
      held[distinct[j]] = values[j - first + 1]
    end
  end
end
local replies = {}
local kb, a = 1, 2
for i = 1, ARGV[1] + 0 do
  local ranked = ARGV[a + 1] + 0
  local d = ranked - ARGV[a + 5]
  a = a + 1
  if bad then
    replies[i] = bad
  elseif version ~= ARGV[a + 5 + ranked + d] + 0 then
    replies[i] = { -1, version }
  else
    replies[i] = draw(KEYS, kb, ranked, ARGV, a, clock_now, held)
  end
  kb = kb + ranked
  a = a + 6 + ranked + d
end
for _, key in ipairs(held[HELD_WRITTEN]) do
  store(key, held[key], clock_now)
end
return replies
