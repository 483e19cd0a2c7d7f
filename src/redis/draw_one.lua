
-- One decision per script call, KEYS and ARGV as draw.lua describes them:
-- the quota first (a caller deciding with another quota's numbers must not
-- draw at all), then the clock, then the draw.
-- The hold-offs key comes only after spill keys: k + 1 keys mean d = 0.
local ranked = #KEYS - 2
if ranked + 1 == ARGV[4] + 0 then
  ranked = ranked + 1
end
local d = ranked - ARGV[4]
local _, stop = expect_quota(KEYS[ranked + 1], ARGV[5 + ranked + d], -1)
if stop then
  return stop
end
return draw(KEYS, 0, ranked, ARGV, 0, clock(ARGV[7 + ranked + d]), nil, KEYS[ranked + 2])
