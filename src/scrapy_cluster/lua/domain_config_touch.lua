-- domain_config_touch.lua: make a domain due now in every ready set that holds it,
-- so a changed throttle or blacklist applies on the next pop.
-- KEYS[1]  frontier:spiders SET
-- ARGV[1]  key templates (JSON, see frontier_lib.lua)
-- ARGV[2]  domain            ARGV[3]  now ms, or ''
-- Returns the number of ready entries moved.

local domain = ARGV[2]
local now = now_ms(ARGV[3])
local moved = 0
for _, spider in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  for _, view in ipairs(redis.call('ZRANGE', spider_key('views', spider), 0, -1)) do
    moved = moved + redis.call('ZADD', ready_key(spider, view), 'XX', 'CH', now, domain)
  end
end
return moved
