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
-- count from the newest member's time on. An admission that adds a member
-- trims at most MAX_TRIM of those older than the largest window (they count
-- again only if the clock goes back), so its work stays bounded after a
-- pause; the rest go with later members or with the key, which expires
-- when its newest member leaves the largest window. Denials write nothing,
-- unless denied calls are debited (DEBIT_DENIED): then as much of the cost
-- as keeps every window below 2^53 is written, and retry_after is counted
-- on the log as written.

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

-- first_from returns the oldest member scored from on, as its base, cum
-- and score, or nil.
local function first_from(key, from)
  local m = redis.call('ZRANGEBYSCORE', key, istr(from), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if not m[1] then return nil end
  local base, cum = span(m[1])
  return {base = base, cum = cum, score = tonumber(m[2])}
end

-- nth_score returns the score of the member holding the need-th unit after
-- the base of first, the oldest member scored from on. Mostly that is
-- first; else a binary search over the ranks after it, each member holding
-- a unit at least, so the need-th is at most need - 1 ranks on.
local function nth_score(key, from, first, need)
  if units(first.cum, first.base) >= need then return first.score end
  local lo = redis.call('ZCOUNT', key, '-inf', '(' .. istr(from)) + 1
  local hi = math.min(lo + need - 2, redis.call('ZCARD', key) - 1)
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    local _, cum = span(redis.call('ZRANGE', key, istr(mid), istr(mid))[1])
    if units(cum, first.base) >= need then hi = mid else lo = mid + 1 end
  end
  return tonumber(redis.call('ZRANGE', key, istr(hi), istr(hi), 'WITHSCORES')[2])
end

-- merge adds cost units to the newest member, last, scored newest: adds
-- the new member before removing the old, since removing a key's only
-- member deletes the key with its expiry.
local function merge(key, newest, last, total, cost)
  local base = span(last)
  redis.call('ZADD', key, istr(newest), istr(base) .. ':' .. istr(plus(total, cost)))
  redis.call('ZREM', key, last)
end

-- append adds cost units as a new newest member at now. Only this adds
-- members, so only this trims; and only this moves the newest member, which
-- sets when the key expires.
local function append(key, now, total, cost, max_per)
  redis.call('ZADD', key, istr(now), istr(total) .. ':' .. istr(plus(total, cost)))
  trim(key, now - max_per)
  redis.call('PEXPIRE', key, istr(max_per + 1))
end

function alg.evaluate(key, now, cost, limits)
  local n = #limits
  local max_per = 0
  for i = 1, n do
    if limits[i][2] > max_per then max_per = limits[i][2] end
  end
  local top = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  local newest, last, total = nil, top[1], 0
  if last then
    newest = tonumber(top[2])
    local _, cum = span(last)
    total = cum
  end

  local r = new_result()
  local counts, firsts = {}, {}
  for i = 1, n do
    firsts[i] = first_from(key, now - limits[i][2])
    counts[i] = 0
    if firsts[i] then counts[i] = units(total, firsts[i].base) end
    r.quota[i] = limits[i][1]
    -- compared without forming counts + cost, which may pass 2^53
    r.deny[i] = cost > limits[i][1] - counts[i]
    if r.deny[i] then r.admitted = false end
  end
  -- the units written: the cost when admitted; when denied, under
  -- DEBIT_DENIED, as much of it as keeps every window below 2^53 (the
  -- largest holds the most)
  local added = 0
  if cost > 0 and debits(r.admitted, cost) then
    added = cost
    if not r.admitted then
      local most = 0
      for i = 1, n do
        if counts[i] > most then most = counts[i] end
      end
      added = capped_add(most, cost, MAX_USAGE - 1) - most
    end
  end
  if added > 0 then
    if newest and newest >= now then
      merge(key, newest, last, total, added)
    else
      append(key, now, total, added, max_per)
      newest = now
    end
    if not r.admitted then -- retry is counted on the log as written
      for i = 1, n do firsts[i] = first_from(key, now - limits[i][2]) end
    end
  end

  for i = 1, n do
    local requests, per = limits[i][1], limits[i][2]
    local used = counts[i] + added
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
        local need = used - (requests - cost)
        r.retry[i] = nth_score(key, now - per, firsts[i], need) + per + 1 - now
      end
    end
  end
  return r
end

return decide(alg)
