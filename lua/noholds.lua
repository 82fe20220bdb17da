-- noholds.lua: decide(alg) for calls without penalty or escalations: no
-- hold or hits key, no escalation arguments. Decides as prelude.lua does
-- for such a call (which never reads the hold key) and keeps the same
-- state, so a key moves between the two as its rule gains or loses a
-- penalty, and limiters of either version agree.
--
-- KEYS[1] state: counters, log or bucket of the algorithm
--
-- ARGV[1] now_ms (0: read redis.call('TIME'))
-- ARGV[2] cost
-- then    N limits of alg.width integers each (N at least 1)
--
-- Returns prelude.lua's reply; held is always 0.

local function decide(alg)
  local now = now_ms()
  local cost = tonumber(ARGV[2])
  local limits = read_limits(alg, 3)

  -- r: admitted, and per limit quota, remaining, reset, deny, retry
  local r = alg.evaluate(KEYS[1], now, cost, limits)
  local b = binding(r)
  local remaining = r.remaining[b]
  if remaining < 0 then remaining = 0 end
  local allowed = 0
  if r.admitted then allowed = 1 end
  return {allowed, 0, b - 1, r.quota[b], remaining, r.reset[b], r.retry[b], now}
end
