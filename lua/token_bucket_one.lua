-- token_bucket_one.lua: the token bucket of one limit, for calls without
-- penalty or escalations; after arith.lua, no prelude. Decides as
-- token_bucket.lua does for such a call and keeps the same state, so a key
-- moves between the two as its rule gains or loses a penalty or a second
-- limit, and limiters of either version agree.
--
-- KEYS[1] state: hash with fields t:<per_ms> (milli-tokens), r:<per_ms>
--         (refill remainder) and u:<per_ms> (last update ms), as
--         token_bucket.lua
--
-- ARGV[1] now_ms (0: read redis.call('TIME'))
-- ARGV[2] cost
-- ARGV[3] rate, ARGV[4] per_ms, ARGV[5] burst; per_ms written as Go's
--         strconv writes an int64 (it names the fields)
--
-- Returns prelude.lua's reply: {allowed 1/0, held 0, limit_index 0,
-- limit (burst), remaining, reset_after_ms, retry_after_ms, now_ms}.
--
-- Integers are written with string.format('%d'), exact below 2^53.

local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local cost, rate, per, burst = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local full = burst * 1000

-- fill_time is the ms until the bucket, t milli-tokens and remainder r, is
-- full again.
local function fill_time(t, r)
  if t >= full then return 0 end
  return ceildiv((full - t) * per - r, rate * 1000)
end

local tf, rf, uf = 't:' .. ARGV[4], 'r:' .. ARGV[4], 'u:' .. ARGV[4]
local v = redis.call('HMGET', KEYS[1], tf, rf, uf)
local t = tonumber(v[1])
local rem, upd = 0, now
if t then
  rem = tonumber(v[2]) or 0
  upd = tonumber(v[3]) or now
else
  t = full
end
local elapsed = now - upd
if elapsed < 0 then elapsed = 0 end
if elapsed >= fill_time(t, rem) then
  t, rem = full, 0
else
  local q
  q, rem = divmod(elapsed * rate * 1000 + rem, per)
  t = t + q
end
if upd < now then upd = now end

-- retry_after is the ms until a call of cost fits the bucket holding t.
local function retry_after(t)
  if cost > burst then return per end
  return ceildiv((cost * 1000 - t) * per - rem, rate * 1000)
end

local admitted = t >= cost * 1000
if debits(admitted, cost) then
  -- down to the debt token_bucket.lua allows
  t = math.max(t - cost * 1000, full - divmod(MAX_USAGE, per))
  redis.call('HSET', KEYS[1], tf, string.format('%d', t), rf, string.format('%d', rem), uf, string.format('%d', upd))
  redis.call('PEXPIRE', KEYS[1], string.format('%d', upd + fill_time(t, rem) + 1 - now))
end
local left = divmod(t, 1000)
if left < 0 then left = 0 end
if admitted then return {1, 0, 0, burst, left, fill_time(t, rem), 0, now} end
return {0, 0, 0, burst, left, fill_time(t, rem), retry_after(t), now}
