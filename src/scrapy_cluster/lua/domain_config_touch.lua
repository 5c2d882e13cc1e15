-- domain_config_touch.lua: make a domain due now in every ready set that holds it,
-- so a changed throttle or blacklist applies on the next pop, and wake the spider's waiting
-- crawlers (one token per spider that has the domain queued).
-- KEYS[1]  frontier:spiders SET
-- ARGV[1]  key templates (JSON, see frontier_lib.lua)
-- ARGV[2]  domain            ARGV[3]  now ms, or ''
-- Returns the number of ready entries moved.

local domain = ARGV[2]
local now = now_ms(ARGV[3])
local moved = 0
for _, spider in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local moved_here = 0
  for _, view in ipairs(redis.call('ZRANGE', spider_key('views', spider), 0, -1)) do
    moved_here = moved_here + redis.call('ZADD', ready_key(spider, view), 'XX', 'CH', now, domain)
  end
  wake(spider, math.min(moved_here, 1))
  moved = moved + moved_here
end
return moved
