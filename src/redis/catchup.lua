-- shuffle-limiter: what a wait that slept reads before it keeps its slot,
-- on the Redis server, without writing anything: the quota key, and the
-- hold-offs that other processes made meanwhile. The Rust side puts
-- prelude.lua and held.lua before it.
--
-- KEYS[1]  the quota key, "{limiter-name}:quota".
-- KEYS[2]  the hold-offs hash, "{limiter-name}:held" (holdoff.lua).
-- ARGV[1]  absent in production (the server's clock); the test's time.
--
-- Reply: { the quota key's text (nil when it is missing), then each bucket
-- key of the hash and its instant }, only the instants a hold-off writes
-- (`held_at`): a stray value there would keep every wait's slot for ever.
-- A hash of another type holds no hold-off (the quota is still read); a
-- quota key of another type is an error reply, as for the other scripts.

local quota = redis.pcall('GET', KEYS[1])
if type(quota) == 'table' and quota.err then
  return redis.error_reply('NOTAQUOTA ' .. KEYS[1] .. ' another type: ' .. quota.err)
end
local now = clock(ARGV[1])
local reply = { quota }
local held = redis.pcall('HGETALL', KEYS[2])
if type(held) == 'table' and not held.err then
  for i = 1, #held, 2 do
    local at = held_at(held[i + 1], now)
    if at then
      reply[#reply + 1] = held[i]
      reply[#reply + 1] = string.format('%d', at)
    end
  end
end
return reply
