-- sliding_window_counter.lua: approximate sliding window from two aligned
-- fixed windows (Cloudflare's "sliding window counter"), all-or-nothing over
-- several limits. Runs after prelude.lua (see there for the common KEYS, ARGV
-- and reply).
--
-- KEYS[1] state: hash with fields s:<per_ms> (start of the current window),
--         c:<per_ms> (units admitted in it) and p:<per_ms> (units admitted in
--         the window before it) per limit
-- ARGV    limits are N pairs: requests, per_ms
-- Returns the prelude reply; limit is requests.
--
-- The current window of a limit starts at now - now % per. A stored start
-- later than that (the clock went back) is kept and decided as at its start;
-- a stored start one window earlier rolls over (its count becomes the
-- previous count); an older one counts nothing. With elapsed = now - start
-- (at least 0) and w = per - elapsed, the estimate of the units in the last
-- per ms is prev * w / per + curr, which assumes the previous window's units
-- were spread evenly. A call is admitted when the estimate plus cost is at
-- most requests, in integers:
--   curr + cost <= requests  and  prev * w <= (requests - curr - cost) * per
-- (the same as prev * w + (curr + cost) * per <= requests * per, but no
-- product involves cost, which a client may choose large): every product is
-- at most requests * per, which the rules validator bounds by 2^53.
--
-- remaining is requests - used - ceil(prev * w / per), the floor of requests
-- minus the estimate after the call (used is curr, plus cost if admitted).
-- reset_after is the time until the estimate is 0: 0 when both counts are 0,
-- the end of the current window when only prev is not (its weight reaches 0
-- there), else the end of the next window (where curr's weight does).
-- retry_after (denied) is the exact wait until the same call is admitted if
-- nothing else is; the estimate never rises meanwhile, so it is the first
-- admissible of:
--   cost > requests: never; retry_after is per, as sliding_window and
--     token_bucket answer;
--   later in the current window: prev * w' <= (requests - curr - cost) * per
--     for w' = k = floor((requests - curr - cost) * per / prev), if k >= 1,
--     at start + per - k;
--   in the next window, where prev is curr and curr is 0: at its start if
--     curr is 0, else once w'' <= k = floor((requests - cost) * per / curr),
--     if k >= 1, at start + per + max(0, per - k);
--   at start + 2 * per, where both counts are 0.
-- A denial writes nothing, unless denied calls are debited (DEBIT_DENIED):
-- then a count may pass requests, up to floor(2^53 / per), where prev * w
-- reaches 2^53, and retry_after is counted from the counts after the
-- debit. On a write the key expires at the latest
-- start + 2 * per of its limits: from then on every count it holds would be
-- read as 0, so its expiry never changes a decision.

local alg = {width = 2}

function alg.quota(l)
  return l[1]
end

-- retry_after returns the ms from now until a call of cost that the limit
-- (requests, per) denied would be admitted, curr being the current
-- window's count after the call.
local function retry_after(requests, per, now, start, prev, curr, cost)
  if cost > requests then return per end
  if curr + cost <= requests and prev > 0 then
    local k = divmod((requests - curr - cost) * per, prev)
    if k >= 1 then return start + per - k - now end
  end
  local wait = per
  if curr == 0 then
    wait = 0
  else
    local k = divmod((requests - cost) * per, curr)
    if k >= 1 then wait = per - k end
    if wait < 0 then wait = 0 end
  end
  return start + per + wait - now
end

function alg.evaluate(key, now, cost, limits)
  local n = #limits
  local fields = {}
  for i = 1, n do
    local per = istr(limits[i][2])
    fields[3 * i - 2] = 's:' .. per
    fields[3 * i - 1] = 'c:' .. per
    fields[3 * i] = 'p:' .. per
  end
  local vals = redis.call('HMGET', key, unpack(fields))

  local r = new_result()
  local starts, currs, prevs, weights = {}, {}, {}, {}
  for i = 1, n do
    local requests, per = limits[i][1], limits[i][2]
    local _, off = divmod(now, per)
    local start, curr, prev = now - off, 0, 0
    local s = tonumber(vals[3 * i - 2])
    if s and s >= start then
      start = s
      curr = tonumber(vals[3 * i - 1]) or 0
      prev = tonumber(vals[3 * i]) or 0
    elseif s and s >= start - per then
      prev = tonumber(vals[3 * i - 1]) or 0
    end
    local elapsed = now - start
    if elapsed < 0 then elapsed = 0 end
    starts[i], currs[i], prevs[i], weights[i] = start, curr, prev, per - elapsed
    r.quota[i] = requests
    r.deny[i] = curr + cost > requests or prev * weights[i] > (requests - curr - cost) * per
    if r.deny[i] then r.admitted = false end
  end

  local ttl = 0
  local args = {}
  local debit = debits(r.admitted, cost)
  for i = 1, n do
    local requests, per = limits[i][1], limits[i][2]
    local start, prev = starts[i], prevs[i]
    local used = currs[i]
    if debit then used = capped_add(used, cost, divmod(MAX_USAGE, per)) end
    r.remaining[i] = requests - used - ceildiv(prev * weights[i], per)
    r.reset[i] = 0
    if used > 0 then
      r.reset[i] = start + 2 * per - now
    elseif prev > 0 then
      r.reset[i] = start + per - now
    end
    r.retry[i] = 0
    if r.deny[i] then
      r.retry[i] = retry_after(requests, per, now, start, prev, used, cost)
    end
    if start + 2 * per - now > ttl then ttl = start + 2 * per - now end
    args[6 * i - 5] = fields[3 * i - 2]
    args[6 * i - 4] = istr(start)
    args[6 * i - 3] = fields[3 * i - 1]
    args[6 * i - 2] = istr(used)
    args[6 * i - 1] = fields[3 * i]
    args[6 * i] = istr(prev)
  end
  if debit then write_state(key, args, ttl) end
  return r
end

return decide(alg)
