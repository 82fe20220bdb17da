-- sliding_window_counter_one.lua: the sliding window counter of one limit,
-- for calls without penalty or escalations; after arith.lua, no prelude.
-- Decides as sliding_window_counter.lua does for such a call (see there
-- for the estimate, remaining, reset and retry) and keeps the same state,
-- so a key moves between the two as its rule gains or loses a penalty or a
-- second limit, and limiters of either version agree.
--
-- KEYS[1] state: hash with fields s:<per_ms> (start of the current
--         window), c:<per_ms> (units admitted in it) and p:<per_ms> (units
--         admitted in the window before it), as sliding_window_counter.lua
--
-- ARGV[1] now_ms (0: read redis.call('TIME'))
-- ARGV[2] cost
-- ARGV[3] requests
-- ARGV[4] per_ms, written as Go's strconv writes an int64 (it names the
--         fields)
--
-- Returns prelude.lua's reply: {allowed 1/0, held 0, limit_index 0,
-- limit (requests), remaining, reset_after_ms, retry_after_ms, now_ms}.
--
-- Integers are written with string.format('%d'), exact below 2^53.

local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local cost, requests, per = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])

local sf, cf, pf = 's:' .. ARGV[4], 'c:' .. ARGV[4], 'p:' .. ARGV[4]
local v = redis.call('HMGET', KEYS[1], sf, cf, pf)
local _, off = divmod(now, per)
local start, curr, prev = now - off, 0, 0
local s = tonumber(v[1])
if s and s >= start then
  start = s
  curr = tonumber(v[2]) or 0
  prev = tonumber(v[3]) or 0
elseif s and s >= start - per then
  prev = tonumber(v[2]) or 0
end
local elapsed = now - start
if elapsed < 0 then elapsed = 0 end
local w = per - elapsed
local admitted = curr + cost <= requests and prev * w <= (requests - curr - cost) * per

local used = curr
local debit = debits(admitted, cost)
if debit then
  -- capped as sliding_window_counter.lua caps it
  used = capped_add(curr, cost, divmod(MAX_USAGE, per))
  redis.call('HSET', KEYS[1], sf, string.format('%d', start), cf, string.format('%d', used), pf, string.format('%d', prev))
  redis.call('PEXPIRE', KEYS[1], string.format('%d', start + 2 * per - now))
end
local q, r = divmod(prev * w, per)
if r > 0 then q = q + 1 end
local left = requests - used - q
if left < 0 then left = 0 end
local reset = 0
if used > 0 then
  reset = start + 2 * per - now
elseif prev > 0 then
  reset = start + per - now
end

if not admitted then
  -- the wait until the same call is admitted if nothing else is, as
  -- retry_after in sliding_window_counter.lua, from the count after the
  -- call
  curr = used
  local retry
  if cost > requests then
    retry = per
  else
    if curr + cost <= requests and prev > 0 then
      local k = divmod((requests - curr - cost) * per, prev)
      if k >= 1 then retry = start + per - k - now end
    end
    if not retry then
      local wait = per
      if curr == 0 then
        wait = 0
      else
        local k = divmod((requests - cost) * per, curr)
        if k >= 1 then wait = per - k end
        if wait < 0 then wait = 0 end
      end
      retry = start + per + wait - now
    end
  end
  return {0, 0, 0, requests, left, reset, retry, now}
end
return {1, 0, 0, requests, left, reset, 0, now}
