-- redis_monitor_due.lua: take the crawls whose expiry time has passed, for one Redis Monitor.
-- KEYS[1]  ZSET of timeout keys scored by expiry epoch s (redis-monitor:timeouts)
-- ARGV[1]  now (epoch s)   ARGV[2]  seconds the taker holds them   ARGV[3]  most members
-- Each due member is re-scored to now + hold, so no other monitor takes it meanwhile; the
-- taker removes it once the crawl is expired, and if the taker dies it is due again later.
-- Returns {member, original expiry, ...}.

local now, hold, most = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, most)
for i = 1, #due, 2 do
  redis.call('ZADD', KEYS[1], 'XX', now + hold, due[i])
end
return due
