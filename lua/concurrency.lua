-- concurrency.lua: at most N requests of a key in flight (concurrency
-- limits, decide.Concurrency). After arith.lua, no prelude. The model is
-- decide.Memory (internal/decide/concurrency.go); the differential tests
-- hold the two together.
--
-- KEYS[1] state: sorted set, member a hold id, score the ms it lapses at
--
-- ARGV[1] now_ms (0: read redis.call('TIME'))
-- ARGV[2] cost: 1 takes the hold, 0 asks whether one would fit
-- ARGV[3] release: 1 ends the hold instead, 0 not
-- ARGV[4] hold id (22 base64url characters; may be empty at cost 0, and
--         for a release: then the oldest hold is released)
-- ARGV[5] N: the most holds at once
-- ARGV[6] lifetime_ms: a hold lapses this long after it was taken
--
-- Returns {allowed 1/0, held 0, limit_index 0, limit N, remaining (N less
--          the holds, at least 0), reset_after_ms (until the latest hold
--          lapses; 0 when none), retry_after_ms, released 1/0, lapsed,
--          now_ms}.
--
-- Every call first removes the holds lapsed by now (score <= now: a hold
-- taken at t lasts [t, t + lifetime)) and returns how many (lapsed). Then:
--   take: an id the set holds already (a replay, or a resend of the same
--     call) is admitted and changes nothing; else, with fewer than N held,
--     ZADD NX the id at now + lifetime and set the key to expire one
--     lifetime after its latest hold lapses (from the set's highest score,
--     so a take on a clock gone back never shortens it): holds nobody
--     released (a crashed gateway) are then still there to be counted
--     lapsed by a call in that time; with N held, denied, writing
--     nothing. A denial's retry_after_ms is the time until the earliest
--     hold lapses, at most 1000 (decide.HoldRetryCap): a release may come
--     any moment before that.
--   cost 0: admitted when a hold would fit; writes nothing.
--   release: ZREM the id; released is 1 when the set held it. An unknown
--     id, one released already and one lapsed all answer 0 (ids are not
--     kept past their hold, so the three cannot be told apart). A release
--     is always admitted. A hold is released only on its own key: its id
--     on another key is unknown there. A release without an id ZPOPMINs
--     the oldest hold: the one lapsing first, the smallest id among those
--     lapsing at the same ms; released is 1 when there was one.
-- A take and its release are idempotent, so both may be resent. An emptied
-- set is deleted by Redis, with its expiry.
--
-- Memory (MEMORY USAGE of the key on Redis 7.0, a key name of about 35
-- bytes; a listpack up to zset-max-listpack-entries, 128 by default, then
-- a skiplist and a hash table): 1 hold 136 B; 10 holds 472 B; 100 holds
-- 3.7 KB (about 37 B a hold); 1000 holds 118 KB (about 118 B a hold).
-- TestHoldMemory in internal/redisstore measures it.

local HOLD_RETRY_CAP = 1000

local key = KEYS[1]
local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local cost, release, id = tonumber(ARGV[2]), ARGV[3] == '1', ARGV[4]
local n, life = tonumber(ARGV[5]), tonumber(ARGV[6])

local lapsed = redis.call('ZREMRANGEBYSCORE', key, '-inf', istr(now))
local allowed, released, last = 1, 0, nil
local held = redis.call('ZCARD', key)
if release then
  if id == '' then
    if redis.call('ZPOPMIN', key)[1] then released = 1 end
  else
    released = redis.call('ZREM', key, id)
  end
  held = held - released
elseif cost > 0 then
  if held < n then
    if redis.call('ZADD', key, 'NX', istr(now + life), id) == 1 then
      held = held + 1
      last = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2])
      redis.call('PEXPIRE', key, istr(last - now + life))
    end
  elseif not redis.call('ZSCORE', key, id) then
    allowed = 0
  end
elseif held >= n then
  allowed = 0
end

local remaining, reset, retry = n - held, 0, 0
if remaining < 0 then remaining = 0 end
if held > 0 then
  if not last then last = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2]) end
  reset = last - now
  if allowed == 0 then
    retry = tonumber(redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')[2]) - now
    if retry > HOLD_RETRY_CAP then retry = HOLD_RETRY_CAP end
  end
end
return {allowed, 0, 0, n, remaining, reset, retry, released, lapsed, now}
