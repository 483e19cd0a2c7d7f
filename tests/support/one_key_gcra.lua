-- The usual one-key limiter, the baseline of the Redis benchmarks
-- (integration/benches/redis.rs, server/benches/rls.rs): GCRA on one string
-- key, in microseconds of the server's clock.
--
-- KEYS[1]  the key.  ARGV[1]  the interval, µs.  ARGV[2]  the burst.
-- Reply: { 1, 0 } granted, or { 0, µs until it would be }.
local interval = tonumber(ARGV[1])
local capacity = tonumber(ARGV[2]) * interval
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
local new_tat = math.max(tat, now) + interval
if new_tat - capacity > now then
  return { 0, new_tat - capacity - now }
end
redis.call('SET', KEYS[1], string.format('%d', new_tat), 'PX',
  string.format('%d', math.ceil((new_tat - now) / 1000) + 1000))
return { 1, 0 }
