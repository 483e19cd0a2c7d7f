
-- Many decisions in one script call, applied in the order they come, each
-- exactly as draw_one.lua applies it alone: the same `draw`, at the same
-- clock reading for all (one TIME), and the same quota check, read once
-- since nothing in between changes it. The bucket keys are read once (one
-- MGET) and each key written is stored once, at the end, with what its last
-- decision left in it: what a read between two decisions would have given
-- the second, and the value and lifetime the last write would have left.
--
-- The numbers go both ways packed as little-endian doubles (`unpacked` of
-- draw.lua): Redis turns each reply element into an object of its own too.
--
-- KEYS[1]     the limiter's quota key (draw.lua's KEYS[k + d + 1]).
-- KEYS[2]     the limiter's hold-offs (draw.lua's KEYS[k + d + 2]).
-- KEYS[3..]   the bucket keys of the batch, each once.
-- ARGV[1]     how many decisions.
-- ARGV[2]     "" in production, where the script reads the server's clock;
--             the differential test sends a time in microseconds.
-- ARGV[3]     for each decision: how many numbers follow for it, then its
--             count of bucket keys (k + d), the position in KEYS of each,
--             and its argv[1 .. 6 + k + 2d] of draw.lua (interval, n,
--             start, k, bursts, reserves, version, lead).
--
-- Reply: { packed, errors... }: `packed` holds for each decision in order
-- what draw_one.lua would have answered it ({ -1, version } for another
-- quota's numbers), as its length then its numbers; a decision answered
-- with an error reply has the length -i instead, for errors[i] (a key of
-- another type).
local version, bad = quota_version(KEYS[1])
local sent = ARGV[2]
if sent == '' then
  sent = nil
end
local clock_now = clock(sent)
local held = { [HELD_WRITTEN] = {}, [HELD_WROTE] = {}, [HELD_TIMES] = {}, [HELD_KEYS] = KEYS }
if not bad then
  -- Each key once, in slices (Lua's unpack passes a few thousand values),
  -- at its position in KEYS.
  for first = 3, #KEYS, 1000 do
    local last = first + 999
    if last > #KEYS then
      last = #KEYS
    end
    local values = redis.call('MGET', unpack(KEYS, first, last))
    for j = first, last do
      held[j] = values[j - first + 1]
    end
  end
end
local packed, errors = {}, {}
local blob, at = ARGV[3], 1
for i = 1, ARGV[1] + 0 do
  local count
  count, at = struct.unpack('<d', blob, at)
  local argv
  argv, at = unpacked(blob, at, count)
  local ranked = argv[1]
  local a = 1 + ranked
  local d = ranked - argv[a + 4]
  local reply
  if bad then
    reply = bad
  elseif version ~= argv[a + 5 + ranked + d] then
    reply = { -1, version }
  else
    -- Its keys are the positions in argv[2 .. 1 + ranked].
    reply = draw(argv, 1, ranked, argv, a, clock_now, held, KEYS[2])
  end
  if reply.err then
    errors[#errors + 1] = reply
    packed[i] = struct.pack('<d', -#errors)
  else
    packed[i] = struct.pack(doubles(#reply + 1), #reply, unpack(reply))
  end
end
for _, at in ipairs(held[HELD_WRITTEN]) do
  store(KEYS[at], held[HELD_TIMES][at], clock_now)
end
local replies = { table.concat(packed) }
for e = 1, #errors do
  replies[e + 1] = errors[e]
end
return replies
