-- detect_distinct.lua: adds sightings of members to offenders' sets of
-- distinct members over sliding windows of event time, and returns each set
-- right after its add (abuse.Distinct). All times are integer ms of event
-- time. One call makes N adds, in order (a set's adds in one call or in
-- calls run in order see each other's writes); on Redis Cluster, the keys
-- of one call share a slot.
--
-- Per add i (1..N), with k = 2(i-1) and a = 9(i-1):
-- KEYS[k+1] members:     sorted set, member -> its latest sighting ms; the
--                        set's newest sighting is its highest score
-- KEYS[k+2] introducers: hash, member -> event id that brought it in,
--                        absent when that event id is the member itself;
--                        field '' -> event id of the set's last crossing
--                        (members are never empty)
-- ARGV[a+1] ts_ms         the sighting's event time
-- ARGV[a+2] member
-- ARGV[a+3] event_id
-- ARGV[a+4] window_ms     members seen before newest - window are dropped
-- ARGV[a+5] cap           at most this many members are kept (positive)
-- ARGV[a+6] threshold     the set is over it when its count is above it
-- ARGV[a+7] samples       members returned as evidence when over
-- ARGV[a+8] all_on_cross  1: an add that crosses returns every member
-- ARGV[a+9] ttl_ms        expiry set on the set's keys (positive)
--
-- Returns, per add in order, {newest, count, introduced, crossed, first,
-- last, M, then M members} concatenated, where introduced and crossed are 0
-- or 1, first and last bound the kept members' times when count >
-- threshold (0 otherwise), and the M members (count > threshold only) are
-- every member when crossed and all_on_cross, else the most recently seen
-- up to samples; newest first, ties by member in reverse byte order
-- (ZREVRANGE). Semantics are those of abusetest.MemoryDistinct, the
-- reference:
--   - a kept member only moves forward in time; it is introduced when its
--     introducer is this event, and crossed when it also is the set's last
--     crossing: a redelivered event answers as it did the first time;
--   - a new member within the window is kept with this event as its
--     introducer; over cap, the least recently seen member goes (ZPOPMIN:
--     by time, then member), possibly the new one; the add crossed when the
--     count went from threshold or less to more, and the set remembers it;
--   - a sighting older than the window adds nothing.
-- A member that goes takes its introducer along, so both keys stay within
-- cap + 1 entries whatever the traffic. The newest sighting is never
-- dropped (trimming keeps it, and eviction pops the least recently seen of
-- at least two), so the highest score is the newest sighting ever made.
-- A new set writes no introducer for a member that is its own event (a
-- brute-force set of event ids then is one sorted set, its introducers
-- created only when it crosses).

local call = redis.call
local tonumber = tonumber

local function istr(x)
  return string.format('%d', x)
end

local reply = {}

local function add(km, ki, ts_arg, member, event_id, window, cap, threshold, nsamples, all_on_cross, ttl)
  local ts = tonumber(ts_arg)
  local introduced, crossed, count, newest = 0, 0, 0, ts
  local top = call('ZRANGE', km, -1, -1, 'WITHSCORES')
  if #top == 0 then
    -- A new set: nothing to trim, read or evict.
    call('ZADD', km, ts_arg, member)
    call('PEXPIRE', km, ttl)
    if member ~= event_id then
      call('HSET', ki, member, event_id)
      call('PEXPIRE', ki, ttl)
    end
    introduced, count = 1, 1
    if threshold < 1 then
      crossed = 1
      call('HSET', ki, '', event_id)
      call('PEXPIRE', ki, ttl)
    end
  else
    newest = math.max(tonumber(top[2]), ts)
    local from = newest - window
    local low = call('ZRANGE', km, 0, 0, 'WITHSCORES')
    if tonumber(low[2]) < from then
      local bound = '(' .. istr(from)
      local old = call('ZRANGEBYSCORE', km, '-inf', bound)
      call('ZREMRANGEBYSCORE', km, '-inf', bound)
      for i = 1, #old, 1000 do
        call('HDEL', ki, unpack(old, i, math.min(i + 999, #old)))
      end
    end
    local kept = call('ZSCORE', km, member)
    if kept then
      if ts > tonumber(kept) then call('ZADD', km, ts_arg, member) end
      local intro = call('HGET', ki, member) or member
      if intro == event_id then
        introduced = 1
        if call('HGET', ki, '') == event_id then crossed = 1 end
      end
      count = call('ZCARD', km)
    elseif ts >= from then
      local before = call('ZCARD', km)
      call('ZADD', km, ts_arg, member)
      if member ~= event_id then call('HSET', ki, member, event_id) end
      count = before + 1
      if count > cap then
        local gone = call('ZPOPMIN', km)
        call('HDEL', ki, gone[1])
        count = cap
      end
      introduced = 1
      if before <= threshold and count > threshold then
        crossed = 1
        call('HSET', ki, '', event_id)
      end
    else
      count = call('ZCARD', km)
    end
    call('PEXPIRE', km, ttl)
    call('PEXPIRE', ki, ttl)
  end

  local n = #reply
  if count > threshold then
    local first = tonumber(call('ZRANGE', km, 0, 0, 'WITHSCORES')[2])
    local m = nsamples
    if crossed == 1 and all_on_cross then m = count end
    local names = {}
    if m > 0 then names = call('ZREVRANGE', km, 0, m - 1) end
    reply[n + 1], reply[n + 2], reply[n + 3], reply[n + 4] = newest, count, introduced, crossed
    reply[n + 5], reply[n + 6], reply[n + 7] = first, newest, #names
    for i = 1, #names do reply[n + 7 + i] = names[i] end
  else
    reply[n + 1], reply[n + 2], reply[n + 3], reply[n + 4] = newest, count, introduced, 0
    reply[n + 5], reply[n + 6], reply[n + 7] = 0, 0, 0
  end
end

for i = 1, #KEYS / 2 do
  local a = 9 * (i - 1)
  add(KEYS[2 * i - 1], KEYS[2 * i], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], tonumber(ARGV[a + 4]),
    tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6]), tonumber(ARGV[a + 7]), ARGV[a + 8] == '1', ARGV[a + 9])
end
return reply
