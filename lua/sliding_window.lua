-- sliding_window.lua: sliding-window log, all-or-nothing over several limits.
-- Runs after prelude.lua (see there for the common KEYS, ARGV and reply).
--
-- KEYS[1] state: sorted set, one member "<ms>:<k>" per admitted unit, score ms
-- ARGV    limits are N pairs: requests, per_ms
-- Returns the prelude reply; limit is requests.
--
-- Window i is [now - per_i, now]. Entries older than the largest window are
-- trimmed first; trimming removes whole scores, so the members at score now
-- are exactly "<now>:1" .. "<now>:<ZCOUNT now now>" and new ones continue
-- from there. The key expires when its newest entry leaves the largest
-- window.

local alg = {width = 2}

function alg.quota(l)
  return l[1]
end

local function add(key, now, cost)
  local snow = istr(now)
  local k = redis.call('ZCOUNT', key, snow, snow)
  local args, m = {}, 0
  for j = 1, cost do
    k = k + 1
    args[m + 1] = snow
    args[m + 2] = snow .. ':' .. istr(k)
    m = m + 2
    if m == 1000 or j == cost then
      redis.call('ZADD', key, unpack(args, 1, m))
      m = 0
    end
  end
end

function alg.evaluate(key, now, cost, limits)
  local n = #limits
  local max_per = 0
  for i = 1, n do
    if limits[i][2] > max_per then max_per = limits[i][2] end
  end
  redis.call('ZREMRANGEBYSCORE', key, '-inf', '(' .. istr(now - max_per))

  local r = {admitted = true, quota = {}, remaining = {}, reset = {}, deny = {}, retry = {}}
  local counts = {}
  for i = 1, n do
    counts[i] = redis.call('ZCOUNT', key, istr(now - limits[i][2]), '+inf')
    r.quota[i] = limits[i][1]
    r.deny[i] = counts[i] + cost > limits[i][1]
    if r.deny[i] then r.admitted = false end
  end
  if r.admitted and cost > 0 then add(key, now, cost) end

  local newest = nil
  local top = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if top[2] then newest = tonumber(top[2]) end
  if r.admitted and newest then
    redis.call('PEXPIRE', key, istr(newest + max_per + 1 - now))
  end

  for i = 1, n do
    local requests, per = limits[i][1], limits[i][2]
    local used = counts[i]
    if r.admitted then used = used + cost end
    r.remaining[i] = requests - used
    r.reset[i] = 0
    if newest and newest >= now - per then r.reset[i] = newest + per + 1 - now end
    r.retry[i] = 0
    if r.deny[i] then
      if cost > requests then
        r.retry[i] = per
      else
        -- the need-th oldest entry in the window must leave it first
        local need = counts[i] + cost - requests
        local e = redis.call('ZRANGEBYSCORE', key, istr(now - per), '+inf',
          'WITHSCORES', 'LIMIT', need - 1, 1)
        r.retry[i] = tonumber(e[2]) + per + 1 - now
      end
    end
  end
  return r
end

return decide(alg)
