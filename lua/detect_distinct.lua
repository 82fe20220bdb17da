-- detect_distinct.lua: adds sightings of members to offenders' sets of
-- distinct members over sliding windows of event time, and returns each set
-- right after its add (abuse.Distinct). All times are integer ms of event
-- time. One call makes N adds, in order (a set's adds in one call or in
-- calls run in order see each other's writes); on Redis Cluster, the keys
-- of one call share a slot.
--
-- Per add i (1..N), with k = 4(i-1) and a = 11(i-1):
-- KEYS[k+1] members:     sorted set, member -> its latest sighting ms; the
--                        set's newest sighting is its highest score
-- KEYS[k+2] introducers: hash, member -> event id that brought it in,
--                        absent when that event id is the member itself;
--                        field '' -> event id of the set's crossing, gone
--                        once the count is back at or under the threshold
--                        (members are never empty)
-- KEYS[k+3] groups:      sorted set, group -> its latest sighting ms (only
--                        for adds with a group)
-- KEYS[k+4] trusted:     sorted set, member -> its latest trust ms
-- ARGV[a+1] ts_ms         the sighting's event time
-- ARGV[a+2] member
-- ARGV[a+3] event_id
-- ARGV[a+4] window_ms     members seen before newest - window are dropped
-- ARGV[a+5] cap           at most this many members (and groups, and
--                         trusted members) are kept (positive)
-- ARGV[a+6] threshold     the set is over it when its count is above it
-- ARGV[a+7] samples       members returned as evidence when over
-- ARGV[a+8] all_on_cross  1: an add that crosses returns every member
-- ARGV[a+9] ttl_ms        expiry set on the keys it writes (positive)
-- ARGV[a+10] group        the member's group ('' none): the set then counts
--                         groups, not members
-- ARGV[a+11] trust        1: no sighting, but a trust of the member at ts
--
-- Returns, per add in order, {newest, count, introduced, crossed, first,
-- last, trusted, M, then M members, S, then S spared} concatenated, where
-- introduced, crossed and trusted are 0 or 1, first and last bound the kept
-- members' times when count > threshold (0 otherwise); when count >
-- threshold, the listing is every member when crossed and all_on_cross,
-- else the most recently seen up to samples, newest first, ties by member
-- in reverse byte order (ZREVRANGE): its trusted members (trusted at a time
-- within window of newest) are the S spared, the others the M members, and
-- trusted says whether the add's member is one. A trust add returns zeros.
-- Semantics are those of abusetest.MemoryDistinct, the reference:
--   - a kept member only moves forward in time; it is introduced when its
--     introducer is this event, and crossed when it also is the set's last
--     crossing: a redelivered event answers as it did the first time;
--   - when the count (before this add's sighting) is threshold or less,
--     the set forgets its crossing;
--   - a new member within the window is kept with this event as its
--     introducer; over cap, the least recently seen member goes (ZPOPMIN:
--     by time, then member), possibly the new one; the add crossed when the
--     count is over threshold and the set has no crossing (it went from
--     threshold or less to more, or a lowered threshold finds it over), and
--     the set remembers it; but a new member that finds the set already
--     over threshold and without a crossing (a reload lowered threshold,
--     and cap with it) pushes out no member and no group;
--   - with a group, a sighting within the window moves the group forward
--     (or adds it; over cap, the least recently seen group goes), and the
--     count is the groups kept;
--   - a sighting older than the window adds nothing;
--   - a trust moves the member's trust forward (or adds it; over cap, the
--     least recently trusted goes, possibly itself).
-- A member that goes takes its introducer along, so the keys stay within
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

local function zeros()
  local n = #reply
  for i = 1, 9 do reply[n + i] = 0 end
end

-- sight moves key's entry name forward to ts, or adds it and, over cap,
-- pops the least recent; card is key's size before, and it returns it after.
local function sight(key, name, ts_arg, cap, card)
  if call('ZADD', key, 'GT', ts_arg, name) == 0 then return card end
  if card < cap then return card + 1 end
  call('ZPOPMIN', key)
  return card
end

local function trust(kt, ts_arg, member, cap, ttl)
  if call('ZADD', kt, 'GT', ts_arg, member) == 1 and call('ZCARD', kt) > cap then call('ZPOPMIN', kt) end
  call('PEXPIRE', kt, ttl)
  zeros()
end

local function add(km, ki, kg, kt, ts_arg, member, event_id, window, cap, threshold, nsamples, all_on_cross, ttl, group)
  local ts = tonumber(ts_arg)
  local grouped = group ~= ''
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
    if grouped then
      call('ZADD', kg, ts_arg, group)
      call('PEXPIRE', kg, ttl)
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
    local bound = '(' .. istr(from)
    local low = call('ZRANGE', km, 0, 0, 'WITHSCORES')
    if tonumber(low[2]) < from then
      local old = call('ZRANGEBYSCORE', km, '-inf', bound)
      call('ZREMRANGEBYSCORE', km, '-inf', bound)
      for i = 1, #old, 1000 do
        call('HDEL', ki, unpack(old, i, math.min(i + 999, #old)))
      end
    end
    local groups = 0
    if grouped then
      call('ZREMRANGEBYSCORE', kg, '-inf', bound)
      groups = call('ZCARD', kg)
    end
    local members = call('ZCARD', km)
    local before = members
    if grouped then before = groups end
    -- Back at or under the threshold in force: the crossing is over, and
    -- the next introduction over the threshold crosses again (also when a
    -- reload lowered the threshold under a count that never went down).
    if before <= threshold then call('HDEL', ki, '') end
    local kept = call('ZSCORE', km, member)
    if kept then
      if ts > tonumber(kept) then call('ZADD', km, ts_arg, member) end
      if grouped and ts >= from then groups = sight(kg, group, ts_arg, cap, groups) end
      local intro = call('HGET', ki, member) or member
      if intro == event_id then
        introduced = 1
        if call('HGET', ki, '') == event_id then crossed = 1 end
      end
      if grouped then count = groups else count = members end
    elseif ts >= from then
      local room, group_room = cap, cap
      -- Over a threshold lowered under the count, and not crossed: this add
      -- crosses, and pushes nothing out, so the crossing answers every member.
      if before > threshold and call('HEXISTS', ki, '') == 0 then room, group_room = members + 1, groups + 1 end
      call('ZADD', km, ts_arg, member)
      if member ~= event_id then call('HSET', ki, member, event_id) end
      if members < room then
        members = members + 1
      else
        local gone = call('ZPOPMIN', km)
        call('HDEL', ki, gone[1])
      end
      count = members
      if grouped then
        groups = sight(kg, group, ts_arg, group_room, groups)
        count = groups
      end
      introduced = 1
      if count > threshold and call('HEXISTS', ki, '') == 0 then
        crossed = 1
        call('HSET', ki, '', event_id)
      end
    else
      count = before
    end
    call('PEXPIRE', km, ttl)
    call('PEXPIRE', ki, ttl)
    if grouped then call('PEXPIRE', kg, ttl) end
  end

  local n = #reply
  if count > threshold then
    local first = tonumber(call('ZRANGE', km, 0, 0, 'WITHSCORES')[2])
    local m = nsamples
    if crossed == 1 and all_on_cross then m = call('ZCARD', km) end
    local names = {}
    if m > 0 then names = call('ZREVRANGE', km, 0, m - 1) end
    local from = newest - window
    local has_trust = call('EXISTS', kt) == 1
    local function trusted(name)
      if not has_trust then return false end
      local t = call('ZSCORE', kt, name)
      return t ~= false and tonumber(t) >= from
    end
    local members, spared = {}, {}
    for i = 1, #names do
      if trusted(names[i]) then spared[#spared + 1] = names[i] else members[#members + 1] = names[i] end
    end
    local own = 0
    if trusted(member) then own = 1 end
    reply[n + 1], reply[n + 2], reply[n + 3], reply[n + 4] = newest, count, introduced, crossed
    reply[n + 5], reply[n + 6], reply[n + 7], reply[n + 8] = first, newest, own, #members
    for i = 1, #members do reply[n + 8 + i] = members[i] end
    n = n + 8 + #members
    reply[n + 1] = #spared
    for i = 1, #spared do reply[n + 1 + i] = spared[i] end
  else
    reply[n + 1], reply[n + 2], reply[n + 3], reply[n + 4] = newest, count, introduced, 0
    for i = 5, 9 do reply[n + i] = 0 end
  end
end

for i = 1, #KEYS / 4 do
  local a = 11 * (i - 1)
  local k = 4 * (i - 1)
  if ARGV[a + 11] == '1' then
    trust(KEYS[k + 4], ARGV[a + 1], ARGV[a + 2], tonumber(ARGV[a + 5]), ARGV[a + 9])
  else
    add(KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], tonumber(ARGV[a + 4]),
      tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6]), tonumber(ARGV[a + 7]), ARGV[a + 8] == '1', ARGV[a + 9], ARGV[a + 10])
  end
end
return reply
