-- sliding_window.lua: sliding-window log, all-or-nothing over several limits.
-- Runs after prelude.lua (see there for the common KEYS, ARGV and reply).
--
-- KEYS[1] state: sorted set, one member "<base>:<cum>" per millisecond in
--         which units were admitted, score that ms: the units (base, cum]
-- ARGV    limits are N pairs: requests (at most 2^53), per_ms
-- Returns the prelude reply; limit is requests.
--
-- The log is a running total: each member starts where the one before it
-- ends (its base is that member's cum). The units in window i,
-- [now - per_i, now], are the newest member's cum minus the base of the
-- oldest member scored from now - per_i on: two O(log N) lookups, and an
-- admission adds or rewrites one member, whatever its cost (a log of one
-- member per unit took a million members for a cost of a million). Totals
-- are kept modulo 2^53, below which every integer is an exact double, so
-- they never run out however long a key lives; a count is exact below 2^53
-- units (a window holding exactly 2^53, a full limit of 2^53, counts 0).
--
-- Units are recorded at max(now, newest score): when the clock went back
-- they join the newest member instead of going before it, so totals keep
-- growing with scores; windows are still counted from now, so such units
-- count from the newest member's time on. A call trims at most MAX_TRIM of
-- the members older than the largest window (they count again only if the
-- clock goes back), so its work stays bounded after a pause; the rest go
-- in later calls or with the key, which expires when its newest member
-- leaves the largest window.

local alg = {width = 2}

local WRAP = 9007199254740992 -- 2^53
local MAX_TRIM = 32

function alg.quota(l)
  return l[1]
end

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

-- plus returns total + cost modulo 2^53 without an intermediate value at or
-- above 2^53, where doubles lose integers.
local function plus(total, cost)
  if cost >= WRAP - total then return cost - (WRAP - total) end
  return total + cost
end

-- trim removes up to MAX_TRIM members scored below from, oldest first.
local function trim(key, from)
  local stale = redis.call('ZCOUNT', key, '-inf', '(' .. istr(from))
  if stale > 0 then
    redis.call('ZREMRANGEBYRANK', key, 0, istr(math.min(stale, MAX_TRIM) - 1))
  end
end

-- base_from returns the base of the oldest member scored from on, or nil.
local function base_from(key, from)
  local m = redis.call('ZRANGEBYSCORE', key, istr(from), '+inf', 'LIMIT', 0, 1)[1]
  if not m then return nil end
  local base = span(m)
  return base
end

-- nth_score returns the score of the member holding the need-th unit after
-- base, the base of the oldest member scored from on: a binary search over
-- ranks. Every member holds a unit at least, so the need-th is at most
-- need - 1 ranks on.
local function nth_score(key, from, base, need)
  local lo = redis.call('ZCOUNT', key, '-inf', '(' .. istr(from))
  local hi = math.min(lo + need - 1, redis.call('ZCARD', key) - 1)
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    local _, cum = span(redis.call('ZRANGE', key, istr(mid), istr(mid))[1])
    if units(cum, base) >= need then hi = mid else lo = mid + 1 end
  end
  return tonumber(redis.call('ZRANGE', key, istr(hi), istr(hi), 'WITHSCORES')[2])
end

-- record adds cost units at ms at (at >= newest): into the newest member
-- when it has that score, else as a new member.
local function record(key, at, cost, newest, last, total)
  local base = total
  if at == newest then
    base = span(last)
    redis.call('ZREM', key, last)
  end
  redis.call('ZADD', key, istr(at), istr(base) .. ':' .. istr(plus(total, cost)))
end

function alg.evaluate(key, now, cost, limits)
  local n = #limits
  local max_per = 0
  for i = 1, n do
    if limits[i][2] > max_per then max_per = limits[i][2] end
  end
  -- read before trimming: the total carries on when every member has left
  local top = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  local newest, last, total = nil, top[1], 0
  if last then
    newest = tonumber(top[2])
    local _, cum = span(last)
    total = cum
  end
  trim(key, now - max_per)

  local r = {admitted = true, quota = {}, remaining = {}, reset = {}, deny = {}, retry = {}}
  local counts, bases = {}, {}
  for i = 1, n do
    bases[i] = base_from(key, now - limits[i][2])
    counts[i] = 0
    if bases[i] then counts[i] = units(total, bases[i]) end
    r.quota[i] = limits[i][1]
    -- compared without forming counts + cost, which may pass 2^53
    r.deny[i] = cost > limits[i][1] - counts[i]
    if r.deny[i] then r.admitted = false end
  end
  if r.admitted and cost > 0 then
    local at = now
    if newest and newest > now then at = newest end
    record(key, at, cost, newest, last, total)
    newest = at
  end
  -- a key whose newest member left the largest window (it outlived its
  -- expiry: the clock went back) keeps the expiry it had: a PEXPIRE in the
  -- past would delete it at once, at a cost that grows with its size
  if r.admitted and newest and newest >= now - max_per then
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
        -- the member holding the need-th oldest unit in the window must
        -- leave it first
        local need = counts[i] - (requests - cost)
        r.retry[i] = nth_score(key, now - per, bases[i], need) + per + 1 - now
      end
    end
  end
  return r
end

return decide(alg)
