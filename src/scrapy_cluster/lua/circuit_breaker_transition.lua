-- circuit_breaker_transition.lua: change one domain's circuit-breaker state if nobody changed
-- it since it was read (compare-and-set), so with several Redis Monitors a pause, halt or end
-- of pause happens once and only the monitor whose write won reports it.
-- KEYS[1]  circuit-breaker:state HASH: domain -> state JSON
-- KEYS[2]  domain-config:paused HASH: domain -> until ms (the frontier's pop obeys it)
-- KEYS[3]  circuit-breaker:counted-from ZSET: domain -> ms from which its statuses count
-- ARGV[1]  domain
-- ARGV[2]  the state JSON read, '' when the domain had none
-- ARGV[3]  the new state JSON, '' to remove it (the pause is over)
-- ARGV[4]  until ms to pause to (only ever lengthens the domain's pause), '' for none
-- ARGV[5]  counted-from ms to record, '' for none
-- ARGV[6]  now ms: on removal, a pause entry over by then is deleted (a later one, set by a
--          Retry-After, stays)
-- Returns {1, until ms of the domain's pause now (0 when none)} when applied, {0, 0} when the
-- state had changed.

local domain, expected, wanted = ARGV[1], ARGV[2], ARGV[3]
local current = redis.call('HGET', KEYS[1], domain) or ''
if current ~= expected then
  return {0, 0}
end
if wanted == '' then
  redis.call('HDEL', KEYS[1], domain)
else
  redis.call('HSET', KEYS[1], domain, wanted)
end
if ARGV[5] ~= '' then
  redis.call('ZADD', KEYS[3], ARGV[5], domain)
end
local paused = tonumber(redis.call('HGET', KEYS[2], domain))
if ARGV[4] ~= '' and (not paused or paused < tonumber(ARGV[4])) then
  redis.call('HSET', KEYS[2], domain, ARGV[4])
  paused = tonumber(ARGV[4])
elseif wanted == '' and paused and paused <= tonumber(ARGV[6]) then
  redis.call('HDEL', KEYS[2], domain)
  paused = nil
end
return {1, paused or 0}
