-- arith.lua: integer helpers of every rate-limit script. Package lua puts it
-- first.
--
-- All values are integers below 2^53. Integers are written to Redis with
-- string.format('%d') because tostring uses '%.14g' and would round large
-- values.

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

