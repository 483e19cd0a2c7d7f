
-- One decision per script call, KEYS and argv as draw.lua describes them:
-- the quota first (a caller deciding with another quota's numbers must not
-- draw at all), then the clock, then the draw. argv comes packed in
-- ARGV[1], and the reply goes packed the same way.
-- The hold-offs key comes only after spill keys: k + 1 keys mean d = 0.
local argv = unpacked(ARGV[1], 1, #ARGV[1] / 8)
local ranked = #KEYS - 2
if ranked + 1 == argv[4] then
  ranked = ranked + 1
end
local d = ranked - argv[4]
local _, reply = expect_quota(KEYS[ranked + 1], argv[5 + ranked + d], -1)
if not reply then
  reply = draw(KEYS, 0, ranked, argv, 0, clock(argv[7 + ranked + d]), nil, KEYS[ranked + 2])
end
if reply.err then
  return reply
end
-- Packed as the numbers came: Redis would make an object of each, and the
-- client parse each.
return struct.pack(doubles(#reply), unpack(reply))
