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
-- Work repeated within a batch is done once per batch: the crawl-blacklist
-- check per crawl, the app-crawls SADD per (app, crawl), the dupefilter TTL per
-- filter, the sequence counter per spider (one INCRBY at the end) and the
-- crawl counts per field (see new_batch in frontier_lib.lua).

local now = now_ms(ARGV[2])
local keep_blacklisted = ARGV[3] == '1'
local dupe_ttl_ms = tonumber(ARGV[4])
local view_timeout_ms = tonumber(ARGV[5])
local queued, duplicates, blacklisted = 0, 0, 0
local batch = new_batch()
local woken = {}
local seen_spiders = {}
local crawl_blacklisted = {}   -- spider \0 crawl -> bool
local app_added = {}           -- app-crawls key \0 crawl -> true
local filters = {}             -- dupefilter key -> true (PEXPIRE once at the end)
local sequences = {}           -- spider -> {key, last value, increments}
local dupefilters = {}         -- spider \0 crawl -> dupefilter key

local function seen_before(filter, bucket, record)
  filters[filter] = true
  local value = redis.call('HGET', filter, bucket)
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

local function crawl_is_blacklisted(spider, crawl)
  local id = spider .. '\0' .. crawl
  local known = crawl_blacklisted[id]
  if known == nil then
    known = redis.call('SISMEMBER', spider_key('blacklist', spider), crawl) == 1
    crawl_blacklisted[id] = known
  end
  return known
end

local function dupefilter_key(spider, crawl)
  local id = spider .. '\0' .. crawl
  local key = dupefilters[id]
  if key == nil then
    key = crawl_key('dupefilter', spider, crawl)
    dupefilters[id] = key
  end
  return key
end

local function next_seq(spider)
  local seq = sequences[spider]
  if seq == nil then
    local key = spider_key('seq', spider)
    seq = {key, tonumber(redis.call('GET', key) or '0'), 0}
    sequences[spider] = seq
  end
  seq[2], seq[3] = seq[2] + 1, seq[3] + 1
  return seq[2]
end

local function add_app_crawl(spider, app, crawl)
  local key = app_key(spider, app)
  local id = key .. '\0' .. crawl
  if app_added[id] then return end
  app_added[id] = true
  redis.call('SADD', key, crawl)
end

for i = 6, #ARGV, 8 do
  local spider, domain, priority, crawl = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]), ARGV[i + 3]
  local app, bucket, record, item = ARGV[i + 4], ARGV[i + 5], ARGV[i + 6], ARGV[i + 7]
  prune_views(spider)
  if crawl_is_blacklisted(spider, crawl)
      or (not keep_blacklisted and redis.call('SISMEMBER', KEYS[1], domain) == 1) then
    blacklisted = blacklisted + 1
  elseif bucket ~= '' and seen_before(dupefilter_key(spider, crawl), bucket, record) then
    duplicates = duplicates + 1
  else
    local seq = next_seq(spider)
    local newly = push_item(spider, domain, priority, crawl, seq .. ' ' .. item, false, now,
                            view_timeout_ms, batch)
    add_app_crawl(spider, app, crawl)
    woken[spider] = (woken[spider] or 0) + newly
    queued = queued + 1
  end
end
for _, seq in pairs(sequences) do redis.call('INCRBY', seq[1], seq[3]) end
for filter in pairs(filters) do redis.call('PEXPIRE', filter, dupe_ttl_ms) end
flush_counts(batch)
for spider, tokens in pairs(woken) do wake(spider, math.max(tokens, 1)) end
return {queued, duplicates, blacklisted}
