-- detect_claim.lua: the detector's ledger of bans and warnings of one
-- offender (detect.Ledger): claims a record atomically, escalates repeat
-- offenders, settles a published record. All times are integer ms of event
-- time, except key expiries (wall clock).
--
-- KEYS[1] record:  hash {id, json, state (pending | settled), dur, exp} of the
--                  offender's current ban (or warning)
-- KEYS[2] history: sorted set of the offender's past bans, member ban id,
--                  score ban ms (unused for warnings and settle)
--                  (both share the offender's Redis Cluster hash tag)
--
-- ARGV[1] op: ban | warn | settle
--
-- op ban, warn:
-- ARGV[2] ts_ms      the claim's event time
-- ARGV[3] id         ban id
-- ARGV[4] json       the encoded ban, stored as is
-- ARGV[5] base_ms    duration before escalation (> 0)
-- ARGV[6] factor     escalation factor (<= 1: none)
-- ARGV[7] cap_ms     longest duration (> 0)
-- ARGV[8] period_ms  bans within this long before ts escalate (0: none)
-- ARGV[9] keep_ms    how long the record outlives its duration (wall clock)
-- Returns {status, id, json, state, dur_ms, exp_ms}: status "held" when the
-- stored record expires after ts (it is returned unchanged), else "new" for
-- the record just written in state pending, lasting
-- min(base * factor^n, cap) where n counts the history in [ts - period, ts).
--
-- op settle:
-- ARGV[2] id
-- Returns 1 after marking the record settled, 0 when it holds another id or
-- none.

local function istr(x)
  return string.format('%d', x)
end

local record, history = KEYS[1], KEYS[2]
local op = ARGV[1]

if op == 'settle' then
  if redis.call('HGET', record, 'id') ~= ARGV[2] then return 0 end
  redis.call('HSET', record, 'state', 'settled')
  return 1
end
if op ~= 'ban' and op ~= 'warn' then
  return redis.error_reply('detect_claim: unknown op ' .. tostring(op))
end

local ts, id, json = tonumber(ARGV[2]), ARGV[3], ARGV[4]
local base, factor, cap = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local period, keep = tonumber(ARGV[8]), tonumber(ARGV[9])

local held = redis.call('HMGET', record, 'id', 'json', 'state', 'dur', 'exp')
if held[2] and tonumber(held[5]) and tonumber(held[5]) > ts then
  return {'held', held[1], held[2], held[3], tonumber(held[4]), tonumber(held[5])}
end

local escalate = op == 'ban' and period > 0
local dur = base
if escalate and factor > 1 then
  local n = redis.call('ZCOUNT', history, istr(ts - period), '(' .. istr(ts))
  for _ = 1, n do
    if dur >= cap then break end
    dur = dur * factor
  end
end
if dur > cap then dur = cap end
local exp = ts + dur

redis.call('DEL', record)
redis.call('HSET', record, 'id', id, 'json', json, 'state', 'pending', 'dur', istr(dur), 'exp', istr(exp))
redis.call('PEXPIRE', record, istr(dur + keep))
if escalate then
  redis.call('ZADD', history, istr(ts), id)
  redis.call('ZREMRANGEBYSCORE', history, '-inf', '(' .. istr(ts - period))
  redis.call('PEXPIRE', history, istr(period))
end
return {'new', id, json, 'pending', dur, exp}
