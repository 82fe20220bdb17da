-- arith.lua: integer helpers of every rate-limit script. Package lua puts it
-- first, after the line that sets DEBIT_DENIED and PROBE.
--
-- All values are integers below 2^53. Integers are written to Redis with
-- string.format('%d') because tostring uses '%.14g' and would round large
-- values.

-- MAX_USAGE is the most units a window counts (decide.MaxUsage, 2^53):
-- debits of denied calls stop adding there.
local MAX_USAGE = 9007199254740992

-- debits reports whether a call's cost is written to its state: when
-- admitted, and when denied too in the scripts of rules that debit every
-- call (DEBIT_DENIED, which package lua sets ahead of this file; see
-- decide.Call.DebitDenied); never in the scripts of probes (PROBE: they
-- answer whether the cost would fit, decide.Call.Probe).
local function debits(admitted, cost)
  return not PROBE and (admitted or (DEBIT_DENIED and cost > 0))
end

-- capped_add returns a + b, at most limit, for a, b >= 0.
local function capped_add(a, b, limit)
  if b > limit - a then return limit end
  return a + b
end

local function istr(x)
  return string.format('%d', x)
end

-- divmod returns floor(a / b) and a - b * floor(a / b), exact for integers
-- below 2^53 even where the float quotient rounds to the next integer.
local function divmod(a, b)
  local q = math.floor(a / b)
  local r = a - q * b
  if r < 0 then
    q = q - 1
    r = r + b
  elseif r >= b then
    q = q + 1
    r = r - b
  end
  return q, r
end

local function ceildiv(a, b)
  local q, r = divmod(a, b)
  if r > 0 then
    q = q + 1
  end
  return q
end

