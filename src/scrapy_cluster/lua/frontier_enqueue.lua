-- frontier_enqueue.lua: queue a batch of crawl requests in one round trip.
-- KEYS[1]  domain blacklist SET (domain-config:blacklist)
-- KEYS[2]  frontier:spiders SET
-- ARGV[1]  key templates (JSON, see frontier_lib.lua)
-- ARGV[2]  now ms, or '' for Redis server time
-- ARGV[3]  '1' keep requests of blacklisted domains queued (SCHEDULER_BACKLOG_BLACKLIST), '0' drop
-- ARGV[4]  dupefilter TTL ms
-- ARGV[5]  view idle timeout ms (SCHEDULER_QUEUE_TIMEOUT)
-- ARGV[6..] 8 fields per request: spiderid, domain, priority, crawlid, appid,
--           dupefilter bucket ('' = no duplicate check), dupefilter record, encoded item (JSON)
-- Returns {queued, duplicates, blacklisted}.

local now = now_ms(ARGV[2])
local keep_blacklisted = ARGV[3] == '1'
local dupe_ttl_ms = tonumber(ARGV[4])
local view_timeout_ms = tonumber(ARGV[5])
local queued, duplicates, blacklisted = 0, 0, 0
local woken = {}
local seen_spiders = {}

local function seen_before(filter, bucket, record)
  local value = redis.call('HGET', filter, bucket)
  redis.call('PEXPIRE', filter, dupe_ttl_ms)
  if value then
    local start = 1
    while true do
      local pos = string.find(value, record, start, true)
      if not pos then break end
      if (pos - 1) % RECORD_BYTES == 0 then return true end
      start = pos + 1
    end
  else
    value = ''
  end
  redis.call('HSET', filter, bucket, value .. record)
  redis.call('PEXPIRE', filter, dupe_ttl_ms)
  return false
end

local function prune_views(spider)
  if seen_spiders[spider] then return end
  seen_spiders[spider] = true
  redis.call('SADD', KEYS[2], spider)
  local views = spider_key('views', spider)
  local idle = redis.call('ZRANGEBYSCORE', views, '-inf', '(' .. (now - view_timeout_ms))
  for _, view in ipairs(idle) do
    redis.call('DEL', ready_key(spider, view))
    redis.call('ZREM', views, view)
  end
end

for i = 6, #ARGV, 8 do
  local spider, domain, priority, crawl = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]), ARGV[i + 3]
  local app, bucket, record, item = ARGV[i + 4], ARGV[i + 5], ARGV[i + 6], ARGV[i + 7]
  prune_views(spider)
  if redis.call('SISMEMBER', spider_key('blacklist', spider), crawl) == 1
      or (not keep_blacklisted and redis.call('SISMEMBER', KEYS[1], domain) == 1) then
    blacklisted = blacklisted + 1
  elseif bucket ~= '' and seen_before(crawl_key('dupefilter', spider, crawl), bucket, record) then
    duplicates = duplicates + 1
  else
    local seq = redis.call('INCR', spider_key('seq', spider))
    local newly = push_item(spider, domain, priority, crawl, seq .. ' ' .. item, false, now, view_timeout_ms)
    redis.call('SADD', app_key(spider, app), crawl)
    woken[spider] = (woken[spider] or 0) + newly
    queued = queued + 1
  end
end
for spider, tokens in pairs(woken) do wake(spider, math.max(tokens, 1)) end
return {queued, duplicates, blacklisted}
