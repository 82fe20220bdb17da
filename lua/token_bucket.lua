-- token_bucket.lua: token buckets, all-or-nothing over several limits.
-- Runs after prelude.lua (see there for the common KEYS, ARGV and reply).
--
-- KEYS[1] state: hash with fields per limit t:<per_ms> (milli-tokens),
--         r:<per_ms> (refill remainder, < per_ms) and u:<per_ms> (last
--         update ms); an absent bucket is full
-- ARGV    limits are N triples: rate, per_ms, burst (rate tokens per per_ms,
--         capacity burst)
-- Returns the prelude reply; limit is burst.
--
-- A bucket gains rate*1000 milli-tokens every per_ms; the remainder keeps the
-- refill exact in integers. A denial writes nothing (the refill only depends
-- on the stored state and now), unless denied calls are debited
-- (DEBIT_DENIED): then the bucket goes in debt, down to full minus
-- floor(2^53 / per_ms) milli-tokens, where (full - t) * per_ms reaches 2^53. The key expires when every bucket is full
-- again, counted from its last update (later than now if the clock went
-- back), so an expired key decides exactly like the state it held.

local alg = {width = 3}

function alg.quota(l)
  return l[3]
end

-- fill_time is the ms until a bucket with t milli-tokens and remainder r is
-- full again.
local function fill_time(l, t, r)
  local rate, per, burst = l[1], l[2], l[3]
  if t >= burst * 1000 then return 0 end
  return ceildiv((burst * 1000 - t) * per - r, rate * 1000)
end

-- refill returns a bucket's milli-tokens and remainder elapsed ms (none
-- when negative: the clock went back) after it held t and rem.
local function refill(l, t, rem, elapsed)
  if elapsed < 0 then elapsed = 0 end
  if elapsed >= fill_time(l, t, rem) then return l[3] * 1000, 0 end
  local q
  q, rem = divmod(elapsed * l[1] * 1000 + rem, l[2])
  return t + q, rem
end

-- min_tokens is the lowest a bucket goes in debt (see above).
local function min_tokens(burst, per)
  return burst * 1000 - divmod(MAX_USAGE, per)
end

function alg.evaluate(key, now, cost, limits)
  local n = #limits
  local fields = {}
  for i = 1, n do
    local per = istr(limits[i][2])
    fields[3 * i - 2] = 't:' .. per
    fields[3 * i - 1] = 'r:' .. per
    fields[3 * i] = 'u:' .. per
  end
  local vals = redis.call('HMGET', key, unpack(fields))

  local r = new_result()
  local ts, rs, us = {}, {}, {}
  for i = 1, n do
    local l = limits[i]
    local rate, per, burst = l[1], l[2], l[3]
    local t = tonumber(vals[3 * i - 2])
    local rem, upd = 0, now
    if t then
      rem = tonumber(vals[3 * i - 1]) or 0
      upd = tonumber(vals[3 * i]) or now
    else
      t = burst * 1000
    end
    t, rem = refill(l, t, rem, now - upd)
    if upd < now then upd = now end
    ts[i], rs[i], us[i] = t, rem, upd
    r.quota[i] = burst
    r.deny[i] = t < cost * 1000
    if r.deny[i] then r.admitted = false end
  end

  local ttl = 1
  local args = {}
  local debit = debits(r.admitted, cost)
  for i = 1, n do
    local l = limits[i]
    local rate, per, burst = l[1], l[2], l[3]
    local t = ts[i]
    if debit then t = math.max(t - cost * 1000, min_tokens(burst, per)) end
    r.remaining[i] = divmod(t, 1000)
    r.reset[i] = fill_time(l, t, rs[i])
    r.retry[i] = 0
    if r.deny[i] then
      if cost > burst then
        r.retry[i] = per
      else
        r.retry[i] = ceildiv((cost * 1000 - t) * per - rs[i], rate * 1000)
      end
    end
    if us[i] + r.reset[i] + 1 - now > ttl then ttl = us[i] + r.reset[i] + 1 - now end
    args[6 * i - 5] = fields[3 * i - 2]
    args[6 * i - 4] = istr(t)
    args[6 * i - 3] = fields[3 * i - 1]
    args[6 * i - 2] = istr(rs[i])
    args[6 * i - 1] = fields[3 * i]
    args[6 * i] = istr(us[i])
  end
  if debit then
    local w = alg.lease_write -- lua/lease.lua's fields and expiry, written with the buckets
    if w then
      for j = 1, #w.fields do args[#args + 1] = w.fields[j] end
      ttl = w.ttl(ttl)
    end
    write_state(key, args, ttl)
  end
  return r
end

-- The hooks of lua/lease.lua (its token-bucket steps; see there).

-- capped returns the limits with each burst lowered by the out units
-- lent that may still be unspent, to at least 1.
function alg.capped(limits, out)
  if out == 0 then return limits end
  local c = {}
  for i = 1, #limits do
    local b = limits[i][3] - out
    if b < 1 then b = 1 end
    c[i] = {limits[i][1], limits[i][2], b}
  end
  return c
end

-- add_tokens puts units back in every stored bucket, refilled to now, up
-- to its burst lowered by out.
function alg.add_tokens(key, limits, units, out)
  if units == 0 then return end
  for i = 1, #limits do
    local f = 't:' .. istr(limits[i][2])
    local t = tonumber(redis.call('HGET', key, f))
    if t then
      local top = (limits[i][3] - out) * 1000
      t = t + units * 1000
      if t > top then t = top end
      redis.call('HSET', key, f, istr(t))
    end
  end
end

-- refill_until refills every stored bucket last updated before at up to at,
-- under limits (the bursts lowered by the leases that lapsed at at): room
-- they held fills only from then on, at the rate, not at once.
function alg.refill_until(key, at, limits)
  for i = 1, #limits do
    local l = limits[i]
    local per = istr(l[2])
    local v = redis.call('HMGET', key, 't:' .. per, 'r:' .. per, 'u:' .. per)
    local t, upd = tonumber(v[1]), tonumber(v[3])
    if t and upd and upd < at then
      local rem
      t, rem = refill(l, t, tonumber(v[2]) or 0, at - upd)
      redis.call('HSET', key, 't:' .. per, istr(t), 'r:' .. per, istr(rem), 'u:' .. per, istr(at))
    end
  end
end

-- lease_ttl returns at least the ms until every bucket is full at its real
-- burst, given ttl, the expiry evaluate computes under the burst lowered
-- by out: the key must outlive the lowered burst, or its absence would read
-- as a full bucket early. Refilling out more units takes
-- ceil(out * per / rate) ms at most, plus one for the remainder.
function alg.lease_ttl(limits, ttl, out)
  local most = 0
  for i = 1, #limits do
    local d = ceildiv(out * limits[i][2], limits[i][1]) + 1
    if d > most then most = d end
  end
  return ttl + most
end

-- refund refills each stored bucket of limits to now, as a call would,
-- then puts units back, up to its burst (a reservation's, lua/reserve.lua;
-- reserving rules lease nothing), and returns the most put back in one
-- bucket. As give_back.lua's bucket() without leases.
function alg.refund(key, now, at, units, limits)
  local most = 0
  local ts = {}
  for i = 1, #limits do
    if last_of_per(limits, i) then
      local l = limits[i]
      local per = istr(l[2])
      local v = redis.call('HMGET', key, 't:' .. per, 'r:' .. per, 'u:' .. per)
      local t = tonumber(v[1])
      if t then
        local rem, upd = tonumber(v[2]) or 0, tonumber(v[3]) or now
        t, rem = refill(l, t, rem, now - upd)
        if upd < now then upd = now end
        redis.call('HSET', key, 't:' .. per, istr(t), 'r:' .. per, istr(rem), 'u:' .. per, istr(upd))
        ts[i] = t
      end
    end
  end
  for i = 1, #limits do
    local top = limits[i][3] * 1000
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

return decide(alg)
