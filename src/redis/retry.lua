-- shuffle-limiter: what the retry budget's scripts share (after prelude.lua).
--
-- A bucket's retry budget is one string key beside the bucket's own,
-- "<bucket key>:retry", holding "<deposits> <due>": the deposits in
-- thousandths of a retry, and when its floor's next retry is due, in
-- microseconds of the server's clock (GCRA: one every `every`). A missing
-- key is "0 0": nothing banked, a floor retry due. Each write keeps the
-- key for an hour: an idle budget leaves nothing behind, and a quiet hour
-- does not bank a storm anyway (deposits are capped).

local RETRY = 1000
local KEEP_MS = 3600000

-- The deposits and due time of every KEYS[1..m], deposits cut to `cap` (so
-- a key can never give more than the cap), or nil and the NOTARETRY error
-- reply when one holds something else: another type, or text of another
-- shape (the scripts refuse before writing anything).
local function banks(m, cap)
  local held, due = {}, {}
  for i = 1, m do
    local got = redis.pcall('GET', KEYS[i])
    if type(got) == 'table' and got.err then
      return nil, nil, redis.error_reply('NOTARETRY ' .. KEYS[i] .. ' holds another type: ' .. got.err)
    end
    if not got then
      held[i], due[i] = 0, 0
    else
      local d, t = string.match(got, '^(%d+) (%d+)$')
      d, t = tonumber(d), tonumber(t)
      if not d or not t or d >= 9007199254740992 or t >= 9007199254740992 then
        return nil, nil, redis.error_reply('NOTARETRY ' .. KEYS[i] .. ' ' .. shown(got))
      end
      if d > cap then
        d = cap
      end
      held[i], due[i] = d, t
    end
  end
  return held, due
end

-- `deposited` of src/upstream/retry.rs.
local function deposited(held, earned, cap)
  if held >= cap then
    return held
  end
  return math.min(held + earned, cap)
end

local function keep(key, held, due)
  redis.call('SET', key, string.format('%d %d', held, due), 'PX', KEEP_MS)
end
