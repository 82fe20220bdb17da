-- detect_distinct.lua: adds one sighting of a member to an offender's set of
-- distinct members over a sliding window of event time, and returns the set
-- right after (abuse.Distinct). All times are integer ms of event time.
--
-- KEYS[1] members:     sorted set, member -> its latest sighting ms
-- KEYS[2] introducers: hash, member -> event id that brought it in
-- KEYS[3] meta:        hash, newest -> newest sighting ms,
--                            crossed -> event id of the last crossing
--                      (all three share the offender's Redis Cluster hash tag)
--
-- ARGV[1] ts_ms         the sighting's event time
-- ARGV[2] member
-- ARGV[3] event_id
-- ARGV[4] window_ms     members seen before newest - window are dropped
-- ARGV[5] cap           at most this many members are kept (positive)
-- ARGV[6] threshold     the set is over it when its count is above it
-- ARGV[7] samples       members returned as evidence when over
-- ARGV[8] all_on_cross  1: an add that crosses returns every member
-- ARGV[9] ttl_ms        expiry set on the three keys (positive)
--
-- Returns {newest, count, introduced, crossed, first, last, M, then M members}
-- where introduced and crossed are 0 or 1, first and last bound the kept
-- members' times when count > threshold (0 otherwise), and the M members
-- (count > threshold only) are every member when crossed and all_on_cross,
-- else the most recently seen up to samples; newest first, ties by member in
-- reverse byte order (ZREVRANGE). Semantics are those of
-- abusetest.MemoryDistinct, the reference:
--   - a kept member only moves forward in time; it is introduced when its
--     introducer is this event, and crossed when it also is the set's last
--     crossing: a redelivered event answers as it did the first time;
--   - a new member within the window is kept with this event as its
--     introducer; over cap, the least recently seen member goes (ZPOPMIN:
--     by time, then member), possibly the new one; the add crossed when the
--     count went from threshold or less to more, and the set remembers it;
--   - a sighting older than the window adds nothing.
-- A member that goes takes its introducer along, so both keys stay within
-- cap entries whatever the traffic.

local function istr(x)
  return string.format('%d', x)
end

local km, ki, kx = KEYS[1], KEYS[2], KEYS[3]
local ts = tonumber(ARGV[1])
local member, event_id = ARGV[2], ARGV[3]
local window, cap, threshold = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local nsamples, all_on_cross, ttl = tonumber(ARGV[7]), ARGV[8] == '1', ARGV[9]

local meta = redis.call('HMGET', kx, 'newest', 'crossed')
local newest = tonumber(meta[1] or '')
if not newest or ts > newest then
  newest = ts
  redis.call('HSET', kx, 'newest', istr(newest))
end
local crossed_by = meta[2]
local from = newest - window

local old = redis.call('ZRANGEBYSCORE', km, '-inf', '(' .. istr(from))
if #old > 0 then
  redis.call('ZREMRANGEBYSCORE', km, '-inf', '(' .. istr(from))
  for i = 1, #old, 1000 do
    redis.call('HDEL', ki, unpack(old, i, math.min(i + 999, #old)))
  end
end

local introduced, crossed = 0, 0
local kept = redis.call('ZSCORE', km, member)
if kept then
  redis.call('ZADD', km, 'GT', istr(ts), member)
  if redis.call('HGET', ki, member) == event_id then
    introduced = 1
    if crossed_by == event_id then crossed = 1 end
  end
elseif ts >= from then
  local before = redis.call('ZCARD', km)
  redis.call('ZADD', km, istr(ts), member)
  redis.call('HSET', ki, member, event_id)
  if before + 1 > cap then
    local gone = redis.call('ZPOPMIN', km)
    redis.call('HDEL', ki, gone[1])
  end
  introduced = 1
  if before <= threshold and math.min(before + 1, cap) > threshold then
    crossed = 1
    redis.call('HSET', kx, 'crossed', event_id)
  end
end
local count = redis.call('ZCARD', km)
redis.call('PEXPIRE', km, ttl)
redis.call('PEXPIRE', ki, ttl)
redis.call('PEXPIRE', kx, ttl)

local first, last, names = 0, 0, {}
if count > threshold then
  first = tonumber(redis.call('ZRANGE', km, 0, 0, 'WITHSCORES')[2])
  last = tonumber(redis.call('ZRANGE', km, -1, -1, 'WITHSCORES')[2])
  local n = nsamples
  if crossed == 1 and all_on_cross then n = count end
  if n > 0 then names = redis.call('ZREVRANGE', km, 0, n - 1) end
else
  crossed = 0
end
local reply = {newest, count, introduced, crossed, first, last, #names}
for i = 1, #names do reply[#reply + 1] = names[i] end
return reply
