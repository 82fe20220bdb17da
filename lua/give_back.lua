-- give_back.lua: gives back what a rate-limit script or a counted call
-- counted for a call whose caller was refused without its answer (the round
-- trip outlived the caller's deadline, and the late reply said the call was
-- admitted; see decide.GiveBack). After arith.lua and common.lua, no
-- prelude. The model is
-- decide.Memory.GiveBack; the differential tests hold the two together.
--
-- KEYS[1] the state key of the call (a counted call: its window's counter,
--         <state>:<per_ms>:<window index of at>)
--
-- ARGV[1] now_ms (0: read redis.call('TIME'))
-- ARGV[2] layout: fixed_window, sliding_window, sliding_window_counter,
--         token_bucket (each leased or not), counted, or concurrency
-- ARGV[3] units: the call's cost plus what it was lent (granted)
-- ARGV[4] at: the server ms the call was decided at (decide.Result.At)
-- ARGV[5] granted (token bucket: units lent beyond the cost)
-- ARGV[6] lease_until: the deadline of that lease (token bucket)
-- then    the call's limits, as its algorithm's script reads them; for
--         concurrency instead the hold id
--
-- Returns the units given back: the most taken off any one limit's count
-- (or put back in any one bucket), 0 when nothing was.
--
-- A give-back never lets a key admit more than it would have had the call
-- never been made, and is exact when nothing else intervened:
--   fixed window (hash s:<per>, c:<per>, leased or not): for each limit
--     whose stored window start is the window holding at, the count less
--     the units, at least 0; another window (a later one replaced it)
--     holds none of them.
--   counted: the counter of at's window less the units, at least 0, only
--     if it exists: never a key without an expiry.
--   sliding window counter: for each limit, the units off the count of the
--     window holding at while it is stored: c:<per> when it is the current
--     window, p:<per> when the stored window is the one after it (the
--     call's window rolled over into p); at least 0.
--   sliding window log: the call's units are in the oldest member scored
--     from at on (units are recorded at max(now, newest score)): at most
--     its own span is taken off it, and every later member's base and cum
--     go down by as much (modulo 2^53), so the windows holding that member
--     count that many fewer and the others the same. An emptied member is
--     removed. Nothing when more than MAX_SHIFT members follow (bounded
--     work; the caller counts it dropped), or when at has left the largest
--     window: the call counts in no window, and its member may be trimmed.
--   token bucket (leased or not): each stored bucket refilled to now as a
--     call would (under the cap of live leases; lapsed leases first brought
--     to their slot's end, as lease.lua does), then the units added up to
--     the burst less the units leases hold (lo). Without the call the
--     bucket would hold min(burst, what it holds + units). A leased call
--     whose lease is the key's current one (lease_until == ld) first lowers
--     lo by granted: nobody holds those units; a lease of another slot is
--     not the key's to lower.
--   concurrency (sorted set of holds, concurrency.lua): the call's hold
--     removed while it has not lapsed (score > now), returning 1; a lapsed
--     one is left for the next call to remove and count as lapsed. This
--     one is idempotent: applied again it finds no hold.
-- Penalties and escalations: only the state key is touched, since an
-- admitted call wrote no hold or hit. Probes and denials are never given
-- back (decide.GiveBackOf); units 0 changes nothing. Expiries are kept as
-- they are: a give-back only lowers counts or fills buckets, which never
-- needs a later expiry (or removes a hold). Applied twice, a give-back
-- takes units twice (units of other calls): it is sent at most once; but
-- concurrency's, which may be resent.

local WRAP = 9007199254740992 -- 2^53
local MAX_SHIFT = 64          -- decide.MaxGiveBackShift
local LEASE_SLOT_FIELDS = {'lo', 'ld'}

local key = KEYS[1]
local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local layout = ARGV[2]
if layout == 'concurrency' then
  local lapse = tonumber(redis.call('ZSCORE', key, ARGV[7]))
  if not lapse or lapse <= now then return 0 end
  return redis.call('ZREM', key, ARGV[7])
end
local units, at = tonumber(ARGV[3]), tonumber(ARGV[4])
local granted, lease_until = tonumber(ARGV[5]), tonumber(ARGV[6])

local width = 2
if layout == 'token_bucket' then width = 3 end
local limits = {}
for p = 7, #ARGV, width do
  local l = {}
  for j = 1, width do l[j] = tonumber(ARGV[p + j - 1]) end
  limits[#limits + 1] = l
end

-- window_start returns the start of the window of per holding ms.
local function window_start(ms, per)
  local _, off = divmod(ms, per)
  return ms - off
end

-- counted: the counter of at's window.
local function counted()
  local c = tonumber(redis.call('GET', key))
  if not c or c <= 0 then return 0 end
  local take = math.min(c, units)
  redis.call('DECRBY', key, istr(take))
  return take
end

-- windows: the fixed window, or with previous the sliding window counter.
local function windows(previous)
  local most = 0
  for i = 1, #limits do
    local per = limits[i][2]
    local sp = istr(per)
    local v = redis.call('HMGET', key, 's:' .. sp, 'c:' .. sp, 'p:' .. sp)
    local s = tonumber(v[1])
    local start = window_start(at, per)
    local field, count = nil, 0
    if s == start then
      field, count = 'c:' .. sp, tonumber(v[2]) or 0
    elseif previous and s == start + per then
      field, count = 'p:' .. sp, tonumber(v[3]) or 0
    end
    if field and count > 0 and last_of_per(limits, i) then
      local take = math.min(count, units)
      redis.call('HSET', key, field, istr(count - take))
      if take > most then most = take end
    end
  end
  return most
end

-- span returns the base and cum of a log member "<base>:<cum>".
local function span(member)
  local sep = string.find(member, ':', 1, true)
  return tonumber(string.sub(member, 1, sep - 1)), tonumber(string.sub(member, sep + 1))
end

local function span_units(base, cum)
  local d = cum - base
  if d < 0 then d = d + WRAP end
  return d
end

-- minus returns total - n modulo 2^53, for 0 <= n < 2^53.
local function minus(total, n)
  if total < n then return total - n + WRAP end
  return total - n
end

-- log: the sliding window log. Each member is rewritten by adding its new
-- name before removing its old one, oldest first: the key never empties
-- (which would delete it with its expiry) unless its only member empties,
-- and a new name never meets an old one still in the set.
local function log()
  local max_per = 0
  for i = 1, #limits do
    if limits[i][2] > max_per then max_per = limits[i][2] end
  end
  if at < now - max_per then return 0 end
  local m = redis.call('ZRANGEBYSCORE', key, istr(at), '+inf', 'WITHSCORES', 'LIMIT', 0, MAX_SHIFT + 2)
  if not m[1] or #m > 2 * (MAX_SHIFT + 1) then return 0 end
  local base, cum = span(m[1])
  local take = math.min(units, span_units(base, cum))
  if take <= 0 then return 0 end
  if take == span_units(base, cum) then
    redis.call('ZREM', key, m[1])
  else
    redis.call('ZADD', key, m[2], istr(base) .. ':' .. istr(minus(cum, take)))
    redis.call('ZREM', key, m[1])
  end
  for j = 3, #m, 2 do
    local b, c = span(m[j])
    redis.call('ZADD', key, m[j + 1], istr(minus(b, take)) .. ':' .. istr(minus(c, take)))
    redis.call('ZREM', key, m[j])
  end
  return take
end

-- The token bucket's refill, as token_bucket.lua's.
local function fill_time(l, t, r)
  if t >= l[3] * 1000 then return 0 end
  return ceildiv((l[3] * 1000 - t) * l[2] - r, l[1] * 1000)
end

local function refill(l, t, rem, elapsed)
  if elapsed < 0 then elapsed = 0 end
  if elapsed >= fill_time(l, t, rem) then return l[3] * 1000, 0 end
  local q
  q, rem = divmod(elapsed * l[1] * 1000 + rem, l[2])
  return t + q, rem
end

-- capped returns the bucket of l with its burst lowered by out, to at
-- least 1, as token_bucket.lua's alg.capped.
local function capped(l, out)
  local b = l[3] - out
  if b < 1 then b = 1 end
  return {l[1], l[2], b}
end

-- refill_bucket refills the bucket of l, when stored, to upto under the cap
-- of out and returns its milli-tokens (nil: absent, full). As a call does,
-- it refills however long ago the bucket was updated (a clock gone back
-- refills nothing, but a bucket above the cap comes down to it); only
-- since, a lapsed slot's refill (lease.lua's alg.refill_until) refills only
-- a bucket last updated before upto.
local function refill_bucket(l, upto, out, only_since)
  local sp = istr(l[2])
  local v = redis.call('HMGET', key, 't:' .. sp, 'r:' .. sp, 'u:' .. sp)
  local t = tonumber(v[1])
  if not t then return nil end
  local rem, upd = tonumber(v[2]) or 0, tonumber(v[3]) or upto
  if only_since and upd >= upto then return t end
  t, rem = refill(capped(l, out), t, rem, upto - upd)
  if upd < upto then upd = upto end
  redis.call('HSET', key, 't:' .. sp, istr(t), 'r:' .. sp, istr(rem), 'u:' .. sp, istr(upd))
  return t
end

local function bucket()
  local v = redis.call('HMGET', key, unpack(LEASE_SLOT_FIELDS))
  local out, ld = tonumber(v[1]) or 0, tonumber(v[2])
  if ld and now >= ld then
    -- The slot's leases lapsed at ld: until then the buckets filled under
    -- the cap they held (lease.lua).
    if out > 0 then
      for i = 1, #limits do refill_bucket(limits[i], ld, out, true) end
    end
    redis.call('HDEL', key, 'lo', 'ld')
    out, ld = 0, nil
  end
  local ts = {}
  for i = 1, #limits do
    if last_of_per(limits, i) then ts[i] = refill_bucket(limits[i], now, out, false) end
  end
  if granted > 0 and ld and lease_until == ld then
    out = out - granted
    if out < 0 then out = 0 end
    redis.call('HSET', key, 'lo', istr(out))
  end
  local most = 0
  for i = 1, #limits do
    local top = (limits[i][3] - out) * 1000
    local t = ts[i]
    if t and t < top then
      local added = math.min(units * 1000, top - t)
      redis.call('HSET', key, 't:' .. istr(limits[i][2]), istr(t + added))
      local u = ceildiv(added, 1000)
      if u > most then most = u end
    end
  end
  return most
end

if units <= 0 then return 0 end
if layout == 'counted' then return counted() end
if redis.call('EXISTS', key) == 0 then return 0 end
if layout == 'fixed_window' then return windows(false) end
if layout == 'sliding_window_counter' then return windows(true) end
if layout == 'sliding_window' then return log() end
if layout == 'token_bucket' then return bucket() end
return redis.error_reply('give_back: unknown layout')
