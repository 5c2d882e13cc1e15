-- frontier_enqueue.lua: queue a batch of crawl requests in one round trip.
-- KEYS[1]  domain blacklist SET (domain-config:blacklist)
-- KEYS[2]  frontier:spiders SET
-- KEYS[3]  crawls idle ZSET (frontier:crawls:idle, see settle_idle in frontier_lib.lua)
-- ARGV[1]  key templates (JSON, see frontier_lib.lua)
-- ARGV[2]  now ms, or '' for Redis server time
-- ARGV[3]  '1' keep requests of blacklisted domains queued (SCHEDULER_BACKLOG_BLACKLIST), '0' drop
-- ARGV[4]  dupefilter TTL ms
-- ARGV[5]  view idle timeout ms (SCHEDULER_QUEUE_TIMEOUT)
-- ARGV[6]  '1' count the requests in their crawl's URL funnel, '0' not (retries, already counted)
-- ARGV[7..] 9 fields per request: spiderid, domain, priority, crawlid, appid,
--           dupefilter bucket ('' = no duplicate check), dupefilter fingerprint (7 bytes),
--           2 x depth (0..254) + 1 when depth >= maxdepth (the page's links will be cut),
--           encoded item (JSON, its url first: '{"u":"...",')
-- Returns {queued, duplicates, blacklisted, depth upgrades (queued, moved or held)}.
-- Items are '<seq>:<enqueue ms in base 36> <json>' (the time: TIME, or the injected clock).
-- Funnel (ARGV[6] = '1'): per crawl, HINCRBY of 'submitted' and of one outcome per request,
-- 'queued' (new to the crawl), 'deduplicated' (seen before; depth upgrades included: the URL
-- is not new), 'filtered:blacklisted' (stopped crawl) or 'filtered:domain_blacklisted' (domain
-- blacklist, SCHEDULER_BACKLOG_BLACKLIST off); the hash's TTL is set to the dupefilter's.
-- Depth: each dupefilter record is 7 fingerprint bytes and 1 byte holding the smallest depth at
-- which the crawl saw the URL. A request seen before at a larger depth is a depth upgrade: the
-- record takes the smaller depth, a copy still queued is removed (looked for in the crawl's
-- sub-queues of that domain, at most UPGRADE_SCAN items), and the request is queued at its
-- own (smaller) depth and priority. When no queued copy was found (it was fetched or is being
-- fetched), the URL is fetched again, its new item marked "du" (depth_upgrade), only once the
-- crawl has queued a page at its maxdepth (field LIMIT_FIELD of its dupefilter): only then can
-- links have been cut. Until then the item waits in the crawl's held LIST, released into the
-- queues by the enqueue that first reaches maxdepth; a crawl that fits inside its limit never
-- releases it, so it fetches each page once.
-- Crawl state: a crawl that queues a request is 'running' in its state HASH (started: the ms
-- of its first enqueue, kept when a completed crawl runs again; appid); if it was not running,
-- its state loses its TTL and 'finished'. A crawl that gains a queued count leaves the idle
-- index. Cost: one HGET of the status per crawl of the batch, writes only on a change.
-- TTLs: the dupefilter, funnel and held list of a crawl that ended (complete, stopped,
-- expired) and stays so get what is left of its state's TTL (capped at DUPEFILTER_TIMEOUT for
-- the dupefilter and held list), so a late duplicate or a refused link never outlives it.
-- Work repeated within a batch is done once per batch: the crawl-blacklist
-- check per crawl, the app-crawls SADD per (app, crawl), the dupefilter TTL per
-- filter, the sequence counter per spider (one INCRBY at the end) and the
-- crawl counts per field (see new_batch in frontier_lib.lua).

local now = now_ms(ARGV[2])
local keep_blacklisted = ARGV[3] == '1'
local dupe_ttl_ms = tonumber(ARGV[4])
local view_timeout_ms = tonumber(ARGV[5])
local count_funnel = ARGV[6] == '1'
local queued, duplicates, blacklisted, upgrades = 0, 0, 0, 0
local batch = new_batch()
local woken = {}
local seen_spiders = {}
local crawl_blacklisted = {}   -- spider \0 crawl -> bool
local app_added = {}           -- app-crawls key \0 crawl -> true
local filters = {}             -- dupefilter key -> {spider, crawl} (PEXPIRE once at the end)
local holds = {}               -- held LIST key -> {spider, crawl} (PEXPIRE once at the end)
local touched = {}             -- spider \0 crawl -> {spider, crawl, app}: queued something
local sequences = {}           -- spider -> {key, last value, increments}
local dupefilters = {}         -- spider \0 crawl -> dupefilter key
local funnels = {}             -- spider \0 crawl -> {key, field -> count}
local ITEM_STAMP = ':' .. base36(now) .. ' '

local UPGRADE_SCAN = 10000
local LIMIT_FIELD = 'limit'    -- in the dupefilter hash (bucket fields are 3 hex digits)

-- 'new' (recorded now), 'duplicate' (seen at this depth or a smaller one) or 'upgrade'
-- (seen only at larger depths; the record now holds this depth).
local function dedupe(filter, bucket, fingerprint, depth)
  local value = redis.call('HGET', filter, bucket) or ''
  local start = 1
  while true do
    local pos = string.find(value, fingerprint, start, true)
    if not pos then break end
    if (pos - 1) % RECORD_BYTES == 0 then
      local at = pos + RECORD_BYTES - 1
      if depth >= string.byte(value, at) then return 'duplicate' end
      redis.call('HSET', filter, bucket,
                 string.sub(value, 1, at - 1) .. string.char(depth) .. string.sub(value, at + 1))
      return 'upgrade'
    end
    start = pos + 1
  end
  redis.call('HSET', filter, bucket, value .. fingerprint .. string.char(depth))
  return 'new'
end

-- The item's url as it is written in items ('"u":"..."', escapes included), or nil.
local function url_field(item)
  if string.sub(item, 1, 6) ~= '{"u":"' then return nil end
  local i = 7
  while true do
    local c = string.sub(item, i, i)
    if c == '\\' then i = i + 2
    elseif c == '"' then return string.sub(item, 2, i)
    elseif c == '' then return nil
    else i = i + 1 end
  end
end

-- Parks the depth-upgraded item of a URL the crawl no longer has queued (fetched or being
-- fetched) in the crawl's held LIST as '<domain>\t<priority>\t<item>', instead of queueing it:
-- release_held queues the whole list when the crawl first queues a page at its maxdepth. One
-- entry per URL: an older entry holding the same url_field is removed first (none is looked
-- for when the item has no url_field). The list's TTL is set once per batch (expire_crawl_keys).
local function hold(spider, crawl, domain, priority, field, item)
  local held = crawl_key('held', spider, crawl)
  for _, entry in ipairs(redis.call('LRANGE', held, 0, -1)) do
    if field and string.find(entry, field, 1, true) then redis.call('LREM', held, 1, entry) end
  end
  redis.call('RPUSH', held, domain .. '\t' .. priority .. '\t' .. item)
  holds[held] = {spider, crawl}
end

-- Removes the crawl's queued copy of a URL from the domain (its item holds url_field).
-- Returns true when one was found.
local function remove_queued_copy(spider, domain, crawl, field, batch)
  if not field then return false end
  local index = domain_index_key(spider, domain)
  local budget = UPGRADE_SCAN
  for _, member in ipairs(redis.call('ZRANGE', index, 0, -1)) do
    local priority, member_crawl = parse_member(member)
    if member_crawl == crawl and budget > 0 then
      local sub = subqueue_key(spider, domain, priority, crawl)
      local items = redis.call('LRANGE', sub, 0, budget - 1)
      budget = budget - #items
      for position, item in ipairs(items) do
        if string.find(item, field, 1, true) then
          redis.call('LREM', sub, 1, item)
          add_count(batch, spider, crawl, domain .. '|' .. priority, -1)
          local head = redis.call('LINDEX', sub, 0)
          if not head then
            redis.call('ZREM', index, member)
          elseif position == 1 then
            redis.call('ZADD', index, index_score(priority, item_seq(head)), member)
          end
          return true
        end
      end
    end
  end
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

-- Counts one request of the crawl under 'submitted' and under ``field`` (written at the end).
local function tally(spider, crawl, field)
  if not count_funnel then return end
  local id = spider .. '\0' .. crawl
  local counts = funnels[id]
  if counts == nil then
    counts = {spider = spider, crawl = crawl, fields = {submitted = 0}}
    funnels[id] = counts
  end
  counts.fields.submitted = counts.fields.submitted + 1
  counts.fields[field] = (counts.fields[field] or 0) + 1
end

local function flush_funnels()
  for _, counts in pairs(funnels) do add_funnel(counts.spider, counts.crawl, counts.fields, dupe_ttl_ms) end
end

-- Crawls that queued a request are running (see the header).
local function mark_running()
  for id, entry in pairs(touched) do
    local spider, crawl, app = entry[1], entry[2], entry[3]
    if crawl_status(spider, crawl) ~= 'running' then
      local state = crawl_key('state', spider, crawl)
      redis.call('HSET', state, 'status', 'running', 'appid', app)
      redis.call('HSETNX', state, 'started', now)
      redis.call('HDEL', state, 'finished')
      redis.call('PERSIST', state)
      statuses[id] = 'running'
    end
  end
end

-- Dupefilter and held-list TTLs: DUPEFILTER_TIMEOUT, or less for a crawl that ended.
local function expire_crawl_keys()
  for key, entry in pairs(filters) do
    redis.call('PEXPIRE', key, math.min(dupe_ttl_ms, crawl_ttl_ms(entry[1], entry[2], dupe_ttl_ms)))
  end
  for key, entry in pairs(holds) do
    redis.call('PEXPIRE', key, math.min(dupe_ttl_ms, crawl_ttl_ms(entry[1], entry[2], dupe_ttl_ms)))
  end
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

local function queue_item(spider, domain, priority, crawl, app, item)
  local seq = next_seq(spider)
  local newly = push_item(spider, domain, priority, crawl, seq .. ITEM_STAMP .. item, false, now,
                          view_timeout_ms, batch)
  add_app_crawl(spider, app, crawl)
  touched[spider .. '\0' .. crawl] = touched[spider .. '\0' .. crawl] or {spider, crawl, app}
  woken[spider] = (woken[spider] or 0) + newly
  queued = queued + 1
end

-- Whether the crawl has queued a page at its maxdepth (read once per filter and call).
local limits = {}
local function limit_reached(filter)
  local known = limits[filter]
  if known == nil then
    known = redis.call('HEXISTS', filter, LIMIT_FIELD) == 1
    limits[filter] = known
  end
  return known
end

-- The crawl just reached its maxdepth: its held upgrades join the queues.
local function release_held(spider, crawl, app)
  local held = crawl_key('held', spider, crawl)
  for _, entry in ipairs(redis.call('LRANGE', held, 0, -1)) do
    local domain, priority, item = string.match(entry, '^([^\t]*)\t([^\t]*)\t(.*)$')
    queue_item(spider, domain, tonumber(priority), crawl, app, item)
  end
  redis.call('DEL', held)
end

for i = 7, #ARGV, 9 do
  local spider, domain, priority, crawl = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]), ARGV[i + 3]
  local app, bucket, fingerprint = ARGV[i + 4], ARGV[i + 5], ARGV[i + 6]
  local depth_arg, item = tonumber(ARGV[i + 7]), ARGV[i + 8]
  local depth, at_limit = math.floor(depth_arg / 2), depth_arg % 2 == 1
  prune_views(spider)
  local seen = 'new'
  if crawl_is_blacklisted(spider, crawl) then
    blacklisted = blacklisted + 1
    seen = 'blacklisted'
    tally(spider, crawl, 'filtered:blacklisted')
  elseif not keep_blacklisted and redis.call('SISMEMBER', KEYS[1], domain) == 1 then
    blacklisted = blacklisted + 1
    seen = 'blacklisted'
    tally(spider, crawl, 'filtered:domain_blacklisted')
  elseif bucket ~= '' then
    local filter = dupefilter_key(spider, crawl)
    filters[filter] = filters[filter] or {spider, crawl}
    seen = dedupe(filter, bucket, fingerprint, depth)
    if seen == 'upgrade' then
      upgrades = upgrades + 1
      local field = url_field(item)
      if not remove_queued_copy(spider, domain, crawl, field, batch) then
        item = (item == '{}') and '{"du":true}' or ('{"du":true,' .. string.sub(item, 2))
        if not limit_reached(filter) then
          hold(spider, crawl, domain, priority, field, item)
          seen = 'held'
        end
      end
    end
    if seen == 'duplicate' then duplicates = duplicates + 1 end
    tally(spider, crawl, seen == 'new' and 'queued' or 'deduplicated')
    if at_limit and (seen == 'new' or seen == 'upgrade') and not limit_reached(filter) then
      redis.call('HSET', filter, LIMIT_FIELD, 1)
      limits[filter] = true
      release_held(spider, crawl, app)
    end
  end
  if bucket == '' and seen == 'new' then tally(spider, crawl, 'queued') end
  if seen == 'new' or seen == 'upgrade' then
    queue_item(spider, domain, priority, crawl, app, item)
  end
end
for _, seq in pairs(sequences) do redis.call('INCRBY', seq[1], seq[3]) end
flush_counts(batch)
settle_idle(KEYS[3], now)
mark_running()
expire_crawl_keys()
flush_funnels()
for spider, tokens in pairs(woken) do wake(spider, math.max(tokens, 1)) end
return {queued, duplicates, blacklisted, upgrades}
