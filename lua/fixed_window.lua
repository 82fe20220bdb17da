-- fixed_window.lua: aligned fixed windows, all-or-nothing over several limits.
-- Runs after prelude.lua (see there for the common KEYS, ARGV and reply).
--
-- KEYS[1] state: hash with fields s:<per_ms> (window start) and c:<per_ms>
--         (count) per limit
-- ARGV    limits are N pairs: requests, per_ms
-- Returns the prelude reply; limit is requests.
--
-- The window of a limit starts at now - now % per. A stored start later than
-- that (the clock went back) is kept. Counters and expiry are written by the
-- same script, so a counter never lives without a TTL. A denial writes
-- nothing, unless denied calls are debited (DEBIT_DENIED).

local alg = {width = 2}

function alg.quota(l)
  return l[1]
end

function alg.evaluate(key, now, cost, limits)
  local n = #limits
  local fields = {}
  for i = 1, n do
    local per = istr(limits[i][2])
    fields[2 * i - 1] = 's:' .. per
    fields[2 * i] = 'c:' .. per
  end
  local vals = redis.call('HMGET', key, unpack(fields))

  local r = new_result()
  local starts, counts = {}, {}
  for i = 1, n do
    local requests, per = limits[i][1], limits[i][2]
    local _, off = divmod(now, per)
    local start, count = now - off, 0
    local s = tonumber(vals[2 * i - 1])
    if s and s >= start then
      start = s
      count = tonumber(vals[2 * i]) or 0
    end
    starts[i], counts[i] = start, count
    r.quota[i] = requests
    r.deny[i] = count + cost > requests
    if r.deny[i] then r.admitted = false end
  end

  local ttl = 0
  local args = {}
  local debit = debits(r.admitted, cost)
  for i = 1, n do
    local used = counts[i]
    if debit then used = capped_add(used, cost, MAX_USAGE) end
    r.remaining[i] = limits[i][1] - used
    r.reset[i] = starts[i] + limits[i][2] - now
    r.retry[i] = 0
    if r.deny[i] then r.retry[i] = r.reset[i] end
    if r.reset[i] > ttl then ttl = r.reset[i] end
    args[4 * i - 3] = fields[2 * i - 1]
    args[4 * i - 2] = istr(starts[i])
    args[4 * i - 1] = fields[2 * i]
    args[4 * i] = istr(used)
  end
  if debit then write_state(key, args, ttl) end
  return r
end

-- refund takes units off the count of each limit whose stored window is
-- the one holding at (a reservation's, lua/reserve.lua) and has not ended
-- by now, at least 0, and returns the most taken off one: a later window
-- holds none of them, and an ended one would admit nothing with them.
function alg.refund(key, now, at, units, limits)
  local most = 0
  for i = 1, #limits do
    local per = limits[i][2]
    local sp = istr(per)
    local v = redis.call('HMGET', key, 's:' .. sp, 'c:' .. sp)
    local _, off = divmod(at, per)
    local count = tonumber(v[2]) or 0
    if tonumber(v[1]) == at - off and now < at - off + per and count > 0 and last_of_per(limits, i) then
      local take = math.min(count, units)
      redis.call('HSET', key, 'c:' .. sp, istr(count - take))
      if take > most then most = take end
    end
  end
  return most
end

return decide(alg)
