-- detect_windows.lua: records one sighting of an offender and returns its
-- tally (detect.Windows). All times are integer ms of event time.
--
-- KEYS[1] violations: sorted set, member event id, score event ms
-- KEYS[2] endpoints:  sorted set, member endpoint, score its latest event ms
-- KEYS[3] newest:     string, the newest event ms seen
--                     (all three share the offender's Redis Cluster hash tag)
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
-- ARGV[10] ttl_ms          expiry set on the three keys
-- ARGV[11] W, followed by W violation windows in ms
--
-- Returns {newest, last_violation, endpoints, first_endpoint, last_endpoint,
--          W, then W pairs count, first_violation,
--          S, then S endpoint names}
-- where the times are ms (0: none), window i is [newest - w_i, newest], the
-- endpoints are those tracked (all within [newest - scan, newest]), and the
-- S samples are the most recent of them, newest first, ties by name in byte
-- order. Semantics are those of detect.MemoryWindows, the reference.
--
-- Recording is idempotent: a violation is added with ZADD NX under its event
-- id and an endpoint only moves forward (ZADD GT), so a redelivered sighting
-- changes no count. Endpoints older than newest - scan are dropped before a
-- new one is admitted, so stale endpoints never take the place of fresh
-- ones under scan_cap.

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

local kv, ke, kn = KEYS[1], KEYS[2], KEYS[3]
local ts = tonumber(ARGV[1])
local violation = ARGV[2] == '1'
local event_id, endpoint = ARGV[3], ARGV[4]
local grace, scan = tonumber(ARGV[5]), tonumber(ARGV[6])
local scan_cap, max_violations = tonumber(ARGV[7]), tonumber(ARGV[8])
local nsamples, ttl = tonumber(ARGV[9]), tonumber(ARGV[10])
local nw = tonumber(ARGV[11])
local windows, max_window = {}, 0
for i = 1, nw do
  windows[i] = tonumber(ARGV[11 + i])
  if windows[i] > max_window then max_window = windows[i] end
end

local stored = tonumber(redis.call('GET', kn) or '')
local newest = ts
if stored and stored > ts then newest = stored end
redis.call('SET', kn, istr(newest))
local sts, snewest = istr(ts), istr(newest)
local scan_from = istr(newest - scan)

redis.call('ZREMRANGEBYSCORE', ke, '-inf', '(' .. scan_from)
if redis.call('ZSCORE', ke, endpoint) then
  redis.call('ZADD', ke, 'GT', sts, endpoint)
elseif ts >= newest - scan and redis.call('ZCARD', ke) < scan_cap then
  redis.call('ZADD', ke, sts, endpoint)
end

if violation then
  redis.call('ZADD', kv, 'NX', sts, event_id)
end
redis.call('ZREMRANGEBYSCORE', kv, '-inf', '(' .. istr(newest - max_window - grace))
redis.call('ZREMRANGEBYRANK', kv, 0, -(math.max(max_violations, 0) + 1))

local last_violation = score(redis.call('ZRANGE', kv, -1, -1, 'WITHSCORES'))
local endpoints = redis.call('ZCOUNT', ke, scan_from, snewest)
local first_endpoint, last_endpoint = 0, 0
if endpoints > 0 then
  first_endpoint = score(redis.call('ZRANGEBYSCORE', ke, scan_from, snewest, 'WITHSCORES', 'LIMIT', 0, 1))
  last_endpoint = score(redis.call('ZREVRANGEBYSCORE', ke, snewest, scan_from, 'WITHSCORES', 'LIMIT', 0, 1))
end

local reply = {newest, last_violation, endpoints, first_endpoint, last_endpoint, nw}
for i = 1, nw do
  local from = istr(newest - windows[i])
  local count = redis.call('ZCOUNT', kv, from, snewest)
  local first = 0
  if count > 0 then
    first = score(redis.call('ZRANGEBYSCORE', kv, from, snewest, 'WITHSCORES', 'LIMIT', 0, 1))
  end
  reply[#reply + 1] = count
  reply[#reply + 1] = first
end
local names = samples(ke, nsamples)
reply[#reply + 1] = #names
for i = 1, #names do reply[#reply + 1] = names[i] end

redis.call('PEXPIRE', kv, ttl)
redis.call('PEXPIRE', ke, ttl)
redis.call('PEXPIRE', kn, ttl)
return reply
