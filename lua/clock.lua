-- clock.lua: the server's clock, which the limiter samples to place calls
-- decided without a script (counted fixed windows) in the server's windows.
--
-- KEYS[1] any key the node serves: it routes the call on a cluster and is
--         not read
--
-- Returns {now_ms}: milliseconds since the Unix epoch, as redis.call('TIME')
-- has it.

local t = redis.call('TIME')
return {tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)}
