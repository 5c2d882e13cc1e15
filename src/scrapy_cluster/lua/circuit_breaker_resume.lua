-- circuit_breaker_resume.lua: end a domain's circuit-breaker pause or halt (and any other
-- pause of it) and forget its statuses, so it is not paused or halted again at once.
-- KEYS[1]  circuit-breaker:state HASH      KEYS[2]  domain-config:paused HASH
-- KEYS[3]  circuit-breaker:counted-from ZSET
-- KEYS[4]  crawler:domain_status:<domain>:window ZSET
-- KEYS[5]  crawler:domain_status:<domain>:last LIST
-- ARGV[1]  domain          ARGV[2]  now ms
-- Returns 1 when the domain was paused or halted, else 0.

local domain, now = ARGV[1], tonumber(ARGV[2])
local had_state = redis.call('HDEL', KEYS[1], domain) == 1
local paused = tonumber(redis.call('HGET', KEYS[2], domain))
redis.call('HDEL', KEYS[2], domain)
redis.call('DEL', KEYS[4], KEYS[5])
redis.call('ZADD', KEYS[3], ARGV[2], domain)
if had_state or (paused and paused > now) then
  return 1
end
return 0
