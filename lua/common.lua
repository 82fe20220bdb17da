-- common.lua: the helpers of the full and hold-free rate-limit scripts.
-- Package lua puts arith.lua first, then this, then a prelude that defines
-- decide(alg) (prelude.lua, or noholds.lua for calls without penalty or
-- escalations), then the body of one algorithm, which defines a table `alg`
-- and ends with `return decide(alg)`.

-- now_ms returns the time of a call in ms: ARGV[1], or when that is 0 the
-- server's clock.
local function now_ms()
  local now = tonumber(ARGV[1])
  if now == 0 then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now
end

-- read_limits returns the n limits of alg.width integers each from ARGV[p]
-- on (n nil: as many as ARGV holds), and the index after them.
local function read_limits(alg, p, n)
  if n == nil then n = (#ARGV - p + 1) / alg.width end
  local limits = {}
  for i = 1, n do
    local l = {}
    for j = 1, alg.width do
      l[j] = tonumber(ARGV[p])
      p = p + 1
    end
    limits[i] = l
  end
  return limits, p
end

-- new_result returns the table alg.evaluate fills: admitted, and per limit
-- quota, remaining, reset, deny and retry.
local function new_result()
  return {admitted = true, quota = {}, remaining = {}, reset = {}, deny = {}, retry = {}}
end

-- write_state writes the hash fields of an admission, args being HSET's
-- field and value pairs, and sets the state key to expire in ttl ms: a field
-- is never written without the expiry.
local function write_state(key, args, ttl)
  redis.call('HSET', key, unpack(args))
  redis.call('PEXPIRE', key, istr(ttl))
end

-- binding returns the 1-based index of the limit whose numbers the result
-- reports: the denying limit with the longest retry, or when admitted the
-- limit with the fewest remaining units; ties go to the lowest index.
local function binding(r)
  local b = nil
  for i = 1, #r.quota do
    if r.admitted then
      if b == nil or r.remaining[i] < r.remaining[b] then b = i end
    elseif r.deny[i] and (b == nil or r.retry[i] > r.retry[b]) then
      b = i
    end
  end
  return b
end

-- last_of_per reports whether limit i of limits is the last of its per:
-- the limits of one per share their fields, which hold what the last of
-- them wrote (a call writes its limits in order), so a refund undoes that
-- one, once (fixed_window.lua's and token_bucket.lua's refunds, and
-- give_back.lua).
local function last_of_per(limits, i)
  for j = i + 1, #limits do
    if limits[j][2] == limits[i][2] then return false end
  end
  return true
end
