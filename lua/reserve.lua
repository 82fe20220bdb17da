-- reserve.lua: decide(alg) for the reservations of a rule whose budget
-- outcome reports spend (decide.Call.Reserve; see internal/decide/reserve.go,
-- its model, which the differential tests hold to this script). Fixed
-- window and token bucket only (their bodies define alg.refund). The
-- script that debits admitted calls takes a reservation; the one that
-- debits denied calls too (DEBIT_DENIED) settles one.
--
-- KEYS[1] state: the hash of the algorithm (never a counted call's keys)
-- KEYS[2] the reservation record (decide.ReservationKey, same hash tag):
--         a string "<units>:<at>:<lapse>": the units reserved, the ms the
--         take was decided at, the ms it lapses at
--
-- ARGV[1] now_ms (0: read redis.call('TIME'))
-- ARGV[2] cost: a take's estimate, or a settle's actual cost
-- ARGV[3] lifetime_ms of a reservation
-- then    N limits of alg.width integers each (N at least 1)
--
-- Returns {allowed 1/0, held 0, limit_index (0-based), limit, remaining,
--          reset_after_ms, retry_after_ms, reserved, settled 1/0,
--          refunded, excess, now_ms}.
--
-- Take: decided as noholds.lua decides a call of that cost; when admitted
--   with a cost above 0, the record is written with a lapse of now +
--   lifetime (and PX lifetime, so Redis forgets it then; the lapse time in
--   it decides, so a settle on the scripts' clock agrees with the model).
--   reserved is the cost then, else 0.
-- Settle: the record is read and deleted, so a second settle of the same
--   id (a replayed report) finds nothing. A record found before its lapse
--   settles (settled 1, reserved its units): an actual cost above the
--   units debits the excess whether it fits or not; one below refunds the
--   difference with alg.refund (the fixed window only into the window the
--   reservation went into, while it is the key's; the token bucket up to
--   its burst). Then the key is decided for the excess (0 without one):
--   its reply says what is left. No record, or a lapsed one, settles
--   nothing: the units stay spent, which never lets the key admit more.

local function decide(alg)
  local now = now_ms()
  local cost = tonumber(ARGV[2])
  local life = tonumber(ARGV[3])
  local limits = read_limits(alg, 4)
  local key, record = KEYS[1], KEYS[2]
  local reserved, settled, refunded, excess = 0, 0, 0, 0
  local r
  if not DEBIT_DENIED then
    r = alg.evaluate(key, now, cost, limits)
    if r.admitted and cost > 0 then
      reserved = cost
      redis.call('SET', record, istr(cost) .. ':' .. istr(now) .. ':' .. istr(now + life), 'PX', istr(life))
    end
  else
    local rec = redis.call('GET', record)
    if rec then
      redis.call('DEL', record)
      local u, at, lapse = string.match(rec, '^(%d+):(%d+):(%d+)$')
      if lapse and now < tonumber(lapse) then
        settled, reserved = 1, tonumber(u)
        if cost > reserved then
          excess = cost - reserved
        elseif cost < reserved then
          refunded = alg.refund(key, now, tonumber(at), reserved - cost, limits)
        end
      end
    end
    r = alg.evaluate(key, now, excess, limits)
  end
  local b = binding(r)
  local remaining = r.remaining[b]
  if remaining < 0 then remaining = 0 end
  local allowed = 0
  if r.admitted then allowed = 1 end
  return {allowed, 0, b - 1, r.quota[b], remaining, r.reset[b], r.retry[b],
          reserved, settled, refunded, excess, now}
end
