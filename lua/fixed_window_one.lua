-- fixed_window_one.lua: the fixed window of one limit, for calls without
-- penalty or escalations; stands alone (no prelude). Decides as
-- fixed_window.lua does for such a call and keeps the same state, so a key
-- moves between the two as its rule gains or loses a penalty or a second
-- limit, and limiters of either version agree.
--
-- KEYS[1] state: hash with fields s:<per_ms> (window start) and c:<per_ms>
--         (count), as fixed_window.lua
--
-- ARGV[1] now_ms (0: read redis.call('TIME'))
-- ARGV[2] cost
-- ARGV[3] requests
-- ARGV[4] per_ms, written as Go's strconv writes an int64 (it names the
--         fields)
--
-- Returns prelude.lua's reply: {allowed 1/0, held 0, limit_index 0,
-- limit (requests), remaining, reset_after_ms, retry_after_ms}.
--
-- Integers are written with string.format('%d'), exact below 2^53.

local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local cost, requests, per = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
-- now % per, corrected where the float quotient now / per rounded to the
-- next integer
local off = now % per
if off < 0 then
  off = off + per
elseif off >= per then
  off = off - per
end
local start, count = now - off, 0
local sf, cf = 's:' .. ARGV[4], 'c:' .. ARGV[4]
local v = redis.call('HMGET', KEYS[1], sf, cf)
local s = tonumber(v[1])
if s and s >= start then
  start = s
  count = tonumber(v[2]) or 0
end
local reset = start + per - now
if count + cost > requests then
  local left = requests - count
  if left < 0 then left = 0 end
  return {0, 0, 0, requests, left, reset, reset}
end
count = count + cost
redis.call('HSET', KEYS[1], sf, string.format('%d', start), cf, string.format('%d', count))
redis.call('PEXPIRE', KEYS[1], string.format('%d', reset))
return {1, 0, 0, requests, requests - count, reset, 0}
