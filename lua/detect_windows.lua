-- detect_windows.lua: records one sighting of an offender and returns its
-- tally (detect.Windows). All times are integer ms of event time.
--
-- KEYS[1] violations: sorted set, member event id, score event ms
-- KEYS[2] endpoints:  sorted set, member endpoint, score its latest event ms
-- KEYS[3] newest:     string, the newest event ms seen
-- KEYS[4] lifted:     string, the ms of the offender's last lifted ban (an
--                     unban, redisabuse.Lift), or missing
--                     (all four share the offender's Redis Cluster hash tag)
--
-- ARGV[1]  ts_ms           the sighting's event time
-- ARGV[2]  violation       1: record a violation, 0: not
-- ARGV[3]  event_id
-- ARGV[4]  endpoint
-- ARGV[5]  grace_ms        violations are kept for the largest window plus
--                          grace (the caller drops late events)
-- ARGV[6]  scan_ms         distinct-endpoint window
-- ARGV[7]  scan_cap        at most this many endpoints are tracked
-- ARGV[8]  max_violations  newest violations kept (by time, then event id)
-- ARGV[9]  samples         endpoints returned as evidence
-- ARGV[10] ttl_ms          expiry set on the three keys (positive)
-- ARGV[11] scan_threshold  see below
-- ARGV[12] W, followed by W violation windows in ms, then W thresholds
--
-- Returns {newest, endpoints, first_endpoint, last_endpoint,
--          W, then (W >= 0) last_violation and W pairs count, first_violation,
--          S, then S endpoint names}
-- where the times are ms (0: none), window i is [newest - w_i, newest], the
-- endpoints are those tracked (all within [newest - scan, newest]), and the
-- S samples are the most recent of them, newest first, ties by name in byte
-- order. Semantics are those of detect.MemoryWindows, the reference:
--   - W is -1 (no violation tallies) unless the sighting is a violation, the
--     only kind that can raise a violation count;
--   - first_endpoint and last_endpoint are 0 when endpoints < scan_threshold;
--   - S is 0 unless endpoints >= scan_threshold or some count_i >= the
--     threshold of window i (evidence is only needed from a threshold on).
--
-- Nothing at or before the lift counts: a sighting with ts <= lifted adds
-- no endpoint and no violation (its tally is that of a sighting that is
-- not a violation), and every sighting drops the endpoints and violations
-- at or before it, so a lifted ban's evidence never feeds another ban,
-- however late it arrives.
--
-- Recording is idempotent: a violation is added with ZADD NX under its event
-- id and an endpoint only moves forward (ZADD GT), so a redelivered sighting
-- changes no count. Endpoints older than newest - scan are dropped before a
-- new one is admitted, so stale endpoints never take the place of fresh
-- ones under scan_cap. Every sighting, violation or not, trims the
-- violations and refreshes the expiry of the keys that exist.

local function istr(x)
  return string.format('%d', x)
end

-- score returns the score of the first member of a WITHSCORES reply, or 0.
local function score(reply)
  if reply[2] then return tonumber(reply[2]) end
  return 0
end

-- samples returns up to n endpoints by score descending, ties by member
-- ascending. Redis orders equal scores by member, and ZREVRANGE reverses that
-- too, so each group of equal scores is read forward. Lua string comparison
-- would depend on the server's locale (strcoll), hence no table.sort.
local function samples(key, n)
  local out = {}
  local below = '+inf'
  while #out < n do
    local top = redis.call('ZREVRANGEBYSCORE', key, below, '-inf', 'WITHSCORES', 'LIMIT', 0, 1)
    if not top[1] then break end
    local s = top[2]
    local group = redis.call('ZRANGEBYSCORE', key, s, s, 'LIMIT', 0, n - #out)
    for i = 1, #group do out[#out + 1] = group[i] end
    below = '(' .. s
  end
  return out
end

local kv, ke, kn, kl = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local ts = tonumber(ARGV[1])
local violation = ARGV[2] == '1'
local event_id, endpoint = ARGV[3], ARGV[4]
local grace, scan = tonumber(ARGV[5]), tonumber(ARGV[6])
local scan_cap, max_violations = tonumber(ARGV[7]), tonumber(ARGV[8])
local nsamples, ttl = tonumber(ARGV[9]), ARGV[10]
local scan_threshold = tonumber(ARGV[11])
local nw = tonumber(ARGV[12])
local windows, thresholds, max_window = {}, {}, 0
for i = 1, nw do
  windows[i] = tonumber(ARGV[12 + i])
  thresholds[i] = tonumber(ARGV[12 + nw + i])
  if windows[i] > max_window then max_window = windows[i] end
end

local lifted = tonumber(redis.call('GET', kl) or '') or 0
if ts <= lifted then violation = false end

-- One round for the newest time: write ts and read the previous value; a
-- late sighting (rare) puts the larger one back.
local sts = istr(ts)
local stored = tonumber(redis.call('SET', kn, sts, 'PX', ttl, 'GET') or '')
local newest = ts
if stored and stored > ts then
  newest = stored
  redis.call('SET', kn, istr(newest), 'PX', ttl)
end
local snewest = istr(newest)
local scan_from = newest - scan

-- After the trim every tracked endpoint is in [newest - scan, newest], so
-- ZCARD is the count. A sighting older than the scan window changes nothing:
-- a tracked endpoint already has a larger score. A new endpoint over the cap
-- is taken back out.
redis.call('ZREMRANGEBYSCORE', ke, '-inf', istr(math.max(scan_from - 1, lifted)))
local endpoints
if ts >= scan_from and ts > lifted and redis.call('ZADD', ke, 'GT', sts, endpoint) == 1 then
  endpoints = redis.call('ZCARD', ke)
  if endpoints > scan_cap then
    redis.call('ZREM', ke, endpoint)
    endpoints = endpoints - 1
  end
else
  endpoints = redis.call('ZCARD', ke)
end
redis.call('PEXPIRE', ke, ttl)

-- Trimming before or after the expiry leaves the same state; a missing set
-- (an offender without violations) needs neither.
local trim = true
if violation then
  redis.call('ZADD', kv, 'NX', sts, event_id)
else
  trim = redis.call('PEXPIRE', kv, ttl) == 1
end
if trim then
  redis.call('ZREMRANGEBYSCORE', kv, '-inf', istr(math.max(newest - max_window - grace - 1, lifted)))
  redis.call('ZREMRANGEBYRANK', kv, 0, -(math.max(max_violations, 0) + 1))
end
if violation then
  redis.call('PEXPIRE', kv, ttl)
end

local first_endpoint, last_endpoint = 0, 0
local evidence = endpoints >= scan_threshold
if evidence and endpoints > 0 then
  first_endpoint = score(redis.call('ZRANGE', ke, 0, 0, 'WITHSCORES'))
  last_endpoint = score(redis.call('ZRANGE', ke, -1, -1, 'WITHSCORES'))
end

local reply = {newest, endpoints, first_endpoint, last_endpoint}
if violation then
  reply[#reply + 1] = nw
  reply[#reply + 1] = score(redis.call('ZRANGE', kv, -1, -1, 'WITHSCORES'))
  for i = 1, nw do
    local from = istr(newest - windows[i])
    local count = redis.call('ZCOUNT', kv, from, snewest)
    local first = 0
    if count > 0 then
      first = score(redis.call('ZRANGEBYSCORE', kv, from, snewest, 'WITHSCORES', 'LIMIT', 0, 1))
    end
    if count >= thresholds[i] then evidence = true end
    reply[#reply + 1] = count
    reply[#reply + 1] = first
  end
else
  reply[#reply + 1] = -1
end
local names = {}
if evidence and endpoints > 0 then names = samples(ke, nsamples) end
reply[#reply + 1] = #names
for i = 1, #names do reply[#reply + 1] = names[i] end
return reply
