-- prelude.lua: decide(alg) with penalty and escalation holds, the full
-- form every call can use (see common.lua for how scripts are assembled).
--
-- KEYS[1] state: counters, log or bucket of the algorithm
-- KEYS[2] hold:  string, integer ms until which the key is denied (penalty),
--                then ":" and the ms from which a call is admitted again
--                when the limits deny past the hold's end
-- KEYS[3] hits:  sorted set of recent limit denials (escalation)
--                (all three share one Redis Cluster hash tag)
--
-- ARGV[1] now_ms (0: read redis.call('TIME'))
-- ARGV[2] cost
-- ARGV[3] penalty_ms (0: none)
-- ARGV[4] E, followed by E triples: triggers, within_ms, penalty_ms
-- then    N, followed by N limits of alg.width integers each
--
-- Returns {allowed 1/0, held 1/0, limit_index (0-based, -1 when held),
--          limit (quota), remaining, reset_after_ms, retry_after_ms,
--          now_ms (the time decided at: a give-back finds by it the window
--          or log member the call counted in, see give_back.lua)}.

-- record_hit adds a hit at now to the escalation log, keeps the newest
-- max_triggers hits and returns the hold candidate the escalations ask for.
local function record_hit(key, now, esc, cand)
  local max_triggers, max_within = 1, 0
  for i = 1, #esc do
    if esc[i][1] > max_triggers then max_triggers = esc[i][1] end
    if esc[i][2] > max_within then max_within = esc[i][2] end
  end
  local snow = istr(now)
  local k = redis.call('ZCOUNT', key, snow, snow) + 1
  redis.call('ZADD', key, snow, snow .. ':' .. istr(k))
  redis.call('ZREMRANGEBYRANK', key, 0, -(max_triggers + 1))
  -- expire once the newest hit (later than now if the clock went back) has
  -- left every window
  local newest = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2])
  redis.call('PEXPIRE', key, istr(newest + max_within + 1 - now))
  for i = 1, #esc do
    local n = redis.call('ZCOUNT', key, istr(now - esc[i][2]), '+inf')
    if n >= esc[i][1] and now + esc[i][3] > cand then
      cand = now + esc[i][3]
    end
  end
  return cand
end

local function decide(alg)
  local now = now_ms()
  local cost = tonumber(ARGV[2])
  local penalty = tonumber(ARGV[3])
  local ne = tonumber(ARGV[4])
  local p = 5
  local esc = {}
  for i = 1, ne do
    esc[i] = {tonumber(ARGV[p]), tonumber(ARGV[p + 1]), tonumber(ARGV[p + 2])}
    p = p + 3
  end
  local n = tonumber(ARGV[p])
  local limits = read_limits(alg, p + 1, n)

  local hold = nil
  if penalty > 0 or ne > 0 then
    local h = redis.call('GET', KEYS[2])
    local until_retry = nil
    if h then
      local a, z = string.match(h, '^(%d+):(%d+)$')
      if a then
        hold, until_retry = tonumber(a), tonumber(z)
      else
        hold = tonumber(h)
      end
    end
    if hold and now < hold then
      local quota = 0
      if n > 0 then quota = alg.quota(limits[1]) end
      -- a held call is told when a call is admitted again, as the denial
      -- that started the hold was: past the hold's end if the limits say so
      local wait = hold - now
      if until_retry and until_retry - now > wait then wait = until_retry - now end
      return {0, 1, -1, quota, 0, wait, wait, now}
    end
  end
  if n == 0 then
    return {1, 0, -1, 0, 0, 0, 0, now}
  end

  -- r: admitted, and per limit quota, remaining, reset, deny, retry
  local r = alg.evaluate(KEYS[1], now, cost, limits)

  local b = binding(r)
  local extra = 0
  if not r.admitted then
    local cand = 0
    if penalty > 0 then cand = now + penalty end
    if ne > 0 then cand = record_hit(KEYS[3], now, esc, cand) end
    if cand > now then
      if not hold or hold < cand then
        local v = istr(cand)
        if now + r.retry[b] > cand then v = v .. ':' .. istr(now + r.retry[b]) end
        redis.call('SET', KEYS[2], v, 'PX', istr(cand - now))
      end
      extra = cand - now
    end
  end

  local remaining = r.remaining[b]
  if remaining < 0 then remaining = 0 end
  local retry = r.retry[b]
  if extra > retry then retry = extra end
  -- the denial that starts a hold reports it as the held calls after it
  -- do: a client told the window's reset would come back too early
  local reset = r.reset[b]
  if extra > reset then reset = extra end
  local allowed = 0
  if r.admitted then allowed = 1 end
  return {allowed, 0, b - 1, r.quota[b], remaining, reset, retry, now}
end

