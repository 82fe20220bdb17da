-- sliding_window_one.lua: the sliding-window log of one limit, for calls
-- without penalty or escalations; after arith.lua, no prelude. Decides as
-- sliding_window.lua does for such a call (see there for the log, its
-- running totals modulo 2^53, trimming and expiry) and keeps the same
-- state, so a key moves between the two as its rule gains or loses a
-- penalty or a second limit, and limiters of either version agree.
--
-- KEYS[1] state: sorted set, one member "<base>:<cum>" per millisecond in
--         which units were admitted, as sliding_window.lua
--
-- ARGV[1] now_ms (0: read redis.call('TIME'))
-- ARGV[2] cost
-- ARGV[3] requests (at most 2^53)
-- ARGV[4] per_ms
--
-- Returns prelude.lua's reply: {allowed 1/0, held 0, limit_index 0,
-- limit (requests), remaining, reset_after_ms, retry_after_ms, now_ms}.
--
-- Integers are written with string.format('%d'), exact below 2^53.

local WRAP = 9007199254740992 -- 2^53
local MAX_TRIM = 32

local key = KEYS[1]
local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local cost, requests, per = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local from = now - per

-- span returns the base and cum of a member "<base>:<cum>".
local function span(member)
  local sep = string.find(member, ':', 1, true)
  return tonumber(string.sub(member, 1, sep - 1)), tonumber(string.sub(member, sep + 1))
end

-- units returns the units between a base and a later total, modulo 2^53.
local function units(cum, base)
  local d = cum - base
  if d < 0 then d = d + WRAP end
  return d
end

-- the newest member: the running total
local top = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
local newest, last, total = nil, top[1], 0
if last then
  newest = tonumber(top[2])
  local _, cum = span(last)
  total = cum
end

-- first reads the oldest member scored from on: its base, cum and score.
local fbase, fcum, fscore = nil, nil, nil
local function first()
  local m = redis.call('ZRANGEBYSCORE', key, istr(from), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if m[1] then
    fbase, fcum = span(m[1])
    fscore = tonumber(m[2])
  end
end

-- the units in the window
first()
local count = 0
if fbase then count = units(total, fbase) end

-- compared without forming count + cost, which may pass 2^53
local admitted = cost <= requests - count
-- the units written: the cost when admitted; when denied, under
-- DEBIT_DENIED, as much of it as keeps the window below 2^53
local added = 0
if cost > 0 and debits(admitted, cost) then
  added = cost
  if not admitted then added = capped_add(count, cost, MAX_USAGE - 1) - count end
end
if added > 0 then
  -- total + added modulo 2^53, without an intermediate value at or above
  -- 2^53
  local sum = total + added
  if added >= WRAP - total then sum = added - (WRAP - total) end
  if newest and newest >= now then
    -- merge into the newest member: add before removing, since removing
    -- a key's only member deletes the key with its expiry
    local base = span(last)
    redis.call('ZADD', key, istr(newest), istr(base) .. ':' .. istr(sum))
    redis.call('ZREM', key, last)
  else
    -- append, trim at most MAX_TRIM members older than the window, and
    -- expire when the new newest member leaves it
    redis.call('ZADD', key, istr(now), istr(total) .. ':' .. istr(sum))
    local stale = redis.call('ZCOUNT', key, '-inf', '(' .. istr(from))
    if stale > 0 then
      redis.call('ZREMRANGEBYRANK', key, 0, istr(math.min(stale, MAX_TRIM) - 1))
    end
    redis.call('PEXPIRE', key, istr(per + 1))
    newest = now
  end
  if not admitted then first() end -- retry is counted on the log as written
end

local reset = 0
if newest and newest >= from then reset = newest + per + 1 - now end
local left = requests - count - added
if left < 0 then left = 0 end
if admitted then return {1, 0, 0, requests, left, reset, 0, now} end

local retry = per
if cost <= requests then
  -- the member holding the need-th oldest unit in the window must leave it
  -- first: mostly the oldest, else a binary search over the ranks after it
  -- (each member holds a unit at least, so the need-th is at most need - 1
  -- ranks on), as nth_score in sliding_window.lua
  local need = count + added - (requests - cost)
  local score = fscore
  if units(fcum, fbase) < need then
    local lo = redis.call('ZCOUNT', key, '-inf', '(' .. istr(from)) + 1
    local hi = math.min(lo + need - 2, redis.call('ZCARD', key) - 1)
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      local _, cum = span(redis.call('ZRANGE', key, istr(mid), istr(mid))[1])
      if units(cum, fbase) >= need then hi = mid else lo = mid + 1 end
    end
    score = tonumber(redis.call('ZRANGE', key, istr(hi), istr(hi), 'WITHSCORES')[2])
  end
  retry = score + per + 1 - now
end
return {0, 0, 0, requests, left, reset, retry, now}
