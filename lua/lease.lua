-- lease.lua: decide(alg) for calls of leased rules (decide.Call.Leased; no
-- penalty or escalations, no sliding window log): gives back and settles
-- the caller's lease, decides the call's cost as noholds.lua does, then
-- lends the caller more units, debited at once (see internal/decide/lease.go
-- for why that never admits more than the limit).
--
-- KEYS[1] state: counters or bucket of the algorithm; for the token bucket
--         also lo (units lent that may be unspent) and ld (the end, ms, of
--         the slot they count in)
--
-- ARGV[1] now_ms (0: read redis.call('TIME'))
-- ARGV[2] cost
-- ARGV[3] ask: the most units to lend beyond cost
-- ARGV[4] until: the deadline (ms) of the lease the caller holds, 0: none
-- ARGV[5] spent: units of it spent since it was last settled
-- ARGV[6] unspent: units of it given back
-- then    N limits of alg.width integers each (N at least 1)
--
-- Returns prelude.lua's reply but its now_ms (held is always 0), then
-- granted, the lease's deadline (ms; 0 when nothing was lent), the ms the
-- caller may spend it for from when it sent the call (lease_for), and
-- now_ms.
--
-- The caller's lease is given back and settled only while it lasts (now <
-- until) and, for a token bucket, only if it belongs to the key's current
-- slot: a give-back never credits a window or slot it was not lent in. A
-- window lease ends with the earliest window of the limits; a bucket's ends
-- with its LEASE_SLOT, when lo is forgotten. Buckets refill up to burst - lo
-- (alg.capped), so units lent early never let them refill past their burst;
-- the first call after the slot brings them to its end under that cap
-- (alg.refill_until), so the room the lapsed leases held fills at the rate
-- from then on, not at once.
-- The grant is min(ask, floor(room / 2)), room being the fewest units the
-- limits have left after the call. The reply's remaining leaves the grant
-- in (it is the caller's); its reset counts it.

local LEASE_SLOT = 5000 -- decide.LeaseSlot

-- give_back takes units off the count of the current window of each limit
-- (window algorithms: field c:<per>), never below 0.
local function give_back(key, limits, units)
  for i = 1, #limits do
    local f = 'c:' .. istr(limits[i][2])
    local c = tonumber(redis.call('HGET', key, f))
    if c then
      c = c - units
      if c < 0 then c = 0 end
      redis.call('HSET', key, f, istr(c))
    end
  end
end

-- lease_for returns the ms a lease of deadline granted at now may be spent
-- for, counted from when the caller sent its call: until the deadline less
-- the end of now's millisecond, since the call ran anywhere within it (now
-- is TIME cut to the millisecond). Nothing is lent when that is not
-- positive.
local function lease_for(deadline, now)
  return deadline - now - 1
end

-- windows_end returns the end of the earliest window of the limits at now.
local function windows_end(now, limits)
  local e = nil
  for i = 1, #limits do
    local per = limits[i][2]
    local _, off = divmod(now, per)
    if e == nil or now - off + per < e then e = now - off + per end
  end
  return e
end

local function decide(alg)
  local now = now_ms()
  local cost, ask = tonumber(ARGV[2]), tonumber(ARGV[3])
  local held, spent, unspent = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
  local limits = read_limits(alg, 7)
  local key = KEYS[1]
  local bucket = alg.capped ~= nil

  local out, deadline, current = 0, 0, 0
  if bucket then
    local v = redis.call('HMGET', key, 'lo', 'ld')
    local lo, ld = tonumber(v[1]) or 0, tonumber(v[2])
    if ld and now < ld then
      out, current = lo, ld
    elseif ld then
      -- The slot's leases lapsed at ld: until then the buckets filled
      -- under the cap they held.
      if lo > 0 then alg.refill_until(key, ld, alg.capped(limits, lo)) end
      redis.call('HDEL', key, 'lo', 'ld')
    end
    deadline = current
    if deadline == 0 then
      local _, off = divmod(now, LEASE_SLOT)
      deadline = now - off + LEASE_SLOT
    end
  else
    deadline = windows_end(now, limits)
  end
  local settle = held > 0 and now < held and (not bucket or held == current)
  if settle and not bucket and unspent > 0 then give_back(key, limits, unspent) end

  local lim = limits
  if bucket then lim = alg.capped(limits, out) end -- the cap in force until now
  -- What the call would leave, read without writing (PROBE), sizes the
  -- grant; then one write debits the call and the grant together.
  local granted = 0
  if ask > 0 and lease_for(deadline, now) > 0 then
    local probe = PROBE
    PROBE = true
    local d = alg.evaluate(key, now, cost, lim)
    PROBE = probe
    if d.admitted then
      local room = d.remaining[1]
      for i = 2, #limits do
        if d.remaining[i] < room then room = d.remaining[i] end
      end
      granted = divmod(room - cost, 2)
      if ask < granted then granted = ask end
    end
  end
  local capped_out = out
  if bucket then
    -- Settled once the buckets hold their refill to now under the old cap,
    -- in the write below (a cap raised before it would refill the past
    -- above it): lo, ld and the expiry go in that write, when it happens.
    if settle then
      out = out - spent - unspent
      if out < 0 then out = 0 end
    end
    out = out + granted
    local w = {fields = {}}
    if out ~= capped_out then w.fields = {'lo', istr(out), 'ld', istr(deadline)} end
    w.ttl = function(ttl)
      if out == 0 and capped_out == 0 then return ttl end -- the algorithm's expiry holds
      ttl = alg.lease_ttl(limits, ttl, capped_out)
      -- While out counts, until the slot's end and the refill of its room.
      if out > 0 then
        local lapse = alg.lease_ttl(limits, deadline - now, out)
        if lapse > ttl then ttl = lapse end
      end
      return ttl
    end
    alg.lease_write = w
  end
  local r = alg.evaluate(key, now, cost + granted, lim)
  alg.lease_write = nil
  local wrote = debits(r.admitted, cost + granted)
  for i = 1, #limits do
    r.remaining[i] = r.remaining[i] + granted -- the call's own answer: the grant is the caller's
  end
  if bucket and wrote and settle and unspent > 0 then alg.add_tokens(key, limits, unspent, out) end

  local b = binding(r)
  local remaining = r.remaining[b]
  if remaining < 0 then remaining = 0 end
  local allowed = 0
  if r.admitted then allowed = 1 end
  local lease_deadline, spend_for = 0, 0
  if granted > 0 then lease_deadline, spend_for = deadline, lease_for(deadline, now) end
  return {allowed, 0, b - 1, alg.quota(limits[b]), remaining, r.reset[b], r.retry[b],
    granted, lease_deadline, spend_for, now}
end
