-- domain_pause.lua: stop every crawler dispatching a domain until a moment, never shortening
-- a pause already set (a halt stays a halt).
-- KEYS[1]  paused domains HASH (domain-config:paused): domain -> until ms
-- ARGV[1]  domain           ARGV[2]  pause for this many ms (> 0)
-- ARGV[3]  now ms, or '' for Redis server time
-- ARGV[4]  latest until ms (the halt value); longer pauses are cut to it
-- Returns the domain's until ms after the call (the later of the old and the new).

local domain, for_ms, latest_ms = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[4])
local now
if ARGV[3] ~= '' then
  now = tonumber(ARGV[3])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local wanted = math.min(now + for_ms, latest_ms)
local current = tonumber(redis.call('HGET', KEYS[1], domain))
if current and current >= wanted then
  return current
end
-- '%.0f': tostring() would print 14 significant digits, and 2^50 has 16
redis.call('HSET', KEYS[1], domain, string.format('%.0f', wanted))
return wanted
