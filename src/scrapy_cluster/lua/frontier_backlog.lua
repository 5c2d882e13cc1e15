-- frontier_backlog.lua: queued requests per spider and domain, for queue stats.
-- KEYS[1]  SET of spiderids (frontier:spiders)
-- ARGV[1]  key templates (JSON, see frontier_lib.lua)
-- ARGV[2]  most domains listed per spider (the rest are still counted in the spider's total)
-- Returns {spiderid, spider total, {domain, count, ...}, ...}, largest domains first is NOT
-- guaranteed: domains come in the order of <spiderid>:domains.
-- Reads the domain indexes and the length of each sub-queue; no item is read.

local most = tonumber(ARGV[2])
local out = {}
for _, spider in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local total, listed = 0, {}
  for _, domain in ipairs(redis.call('ZRANGE', spider_key('domains', spider), 0, -1)) do
    local count = 0
    for _, member in ipairs(redis.call('ZRANGE', domain_index_key(spider, domain), 0, -1)) do
      local priority, crawl = parse_member(member)
      count = count + redis.call('LLEN', subqueue_key(spider, domain, priority, crawl))
    end
    total = total + count
    if count > 0 and #listed < 2 * most then
      table.insert(listed, domain)
      table.insert(listed, count)
    end
  end
  table.insert(out, spider)
  table.insert(out, total)
  table.insert(out, listed)
end
return out
