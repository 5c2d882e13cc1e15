-- frontier_lib.lua: helpers shared by the frontier scripts, prepended to each
-- of them when it is loaded (scrapy_cluster.frontier.scripts). It has no KEYS
-- or ARGV of its own, but every frontier script passes ARGV[1]: a JSON object
-- of key *templates* built by scrapy_cluster.keys with placeholder bytes
-- (\1 spiderid, \2 domain, \3 priority, \4 crawlid, \5 view, \6 appid).
-- Keys found at run time (the domain a pop picks, the crawl of a lease) are
-- made by substituting into those templates, so no key name is spelled here.

local SEQ_SPAN = 274877906944      -- 2^38: a spider's enqueue sequence stays below it
local RECORD_BYTES = 8             -- dupefilter record: fingerprint bytes 2..8, then the smallest depth seen
local WAKE_TOKENS_MAX = 64         -- wake list cap
local WAKE_TTL_MS = 60000
local LEASED_FIELD = '~leased'

local TEMPLATES = cjson.decode(ARGV[1])

-- Every occurrence of ``placeholder`` (one byte) in ``template`` replaced by ``value``.
local function fill(template, placeholder, value)
  local out, start = {}, 1
  while true do
    local at = string.find(template, placeholder, start, true)
    if not at then break end
    out[#out + 1] = string.sub(template, start, at - 1)
    out[#out + 1] = value
    start = at + 1
  end
  if start == 1 then return template end
  out[#out + 1] = string.sub(template, start)
  return table.concat(out)
end

-- Keys built in this script call, by what they were built from: a pop or an enqueue asks for
-- the same few keys many times (bounded by the call's size).
local built = {}

local function spider_key(name, spider)
  local id = name .. '\0' .. spider
  local key = built[id]
  if key == nil then
    key = fill(TEMPLATES[name], '\1', spider)
    built[id] = key
  end
  return key
end

local function domain_index_key(spider, domain)
  local id = 'index\0' .. spider .. '\0' .. domain
  local key = built[id]
  if key == nil then
    key = fill(spider_key('index', spider), '\2', domain)
    built[id] = key
  end
  return key
end

local function subqueue_key(spider, domain, priority, crawl)
  local id = 'sub\0' .. spider .. '\0' .. domain .. '\0' .. priority .. '\0' .. crawl
  local key = built[id]
  if key == nil then
    key = fill(spider_key('subqueue', spider), '\2', domain)
    key = fill(fill(key, '\3', tostring(priority)), '\4', crawl)
    built[id] = key
  end
  return key
end

local function crawl_key(name, spider, crawl)
  local id = 'crawl\0' .. name .. '\0' .. spider .. '\0' .. crawl
  local key = built[id]
  if key == nil then
    key = fill(spider_key(name, spider), '\4', crawl)
    built[id] = key
  end
  return key
end

local function ready_key(spider, view)
  return fill(spider_key('ready', spider), '\5', view)
end

local function app_key(spider, app)
  return fill(spider_key('app', spider), '\6', app)
end

-- Milliseconds: the injected clock when given, else Redis server time.
local function now_ms(injected)
  if injected ~= nil and injected ~= '' then return tonumber(injected) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- A domain index orders its sub-queues: higher priority first, then oldest head.
local function index_score(priority, seq)
  return -priority * SEQ_SPAN + seq
end

-- A ready set orders domains by next-allowed ms; the fraction breaks ties by
-- the priority of the domain's head request (higher first, clamped to +-511).
local function ready_score(allowed_ms, priority)
  local p = math.max(-511, math.min(511, priority))
  return math.floor(allowed_ms) + (512 - p) / 1024
end

local function parse_member(member)
  local bar = string.find(member, '|', 1, true)
  return tonumber(string.sub(member, 1, bar - 1)), string.sub(member, bar + 1)
end

-- Non-negative integer in base 36 (an item's enqueue ms: 8 characters until 2059).
local BASE36 = '0123456789abcdefghijklmnopqrstuvwxyz'
local function base36(n)
  local out = ''
  repeat
    local digit = n % 36
    out = string.sub(BASE36, digit + 1, digit + 1) .. out
    n = (n - digit) / 36
  until n == 0
  return out
end

local function item_seq(item)
  return tonumber(string.match(item, '^(%d+)'))
end

local function wake(spider, tokens)
  if tokens <= 0 then return end
  local key = spider_key('wake', spider)
  local ones = {}
  for i = 1, math.min(tokens, WAKE_TOKENS_MAX) do ones[i] = 1 end
  redis.call('RPUSH', key, unpack(ones))
  redis.call('LTRIM', key, -WAKE_TOKENS_MAX, -1)
  redis.call('PEXPIRE', key, WAKE_TTL_MS)
end

local function live_views(spider, now, view_timeout_ms)
  return redis.call('ZRANGEBYSCORE', spider_key('views', spider), now - view_timeout_ms, '+inf')
end

-- A domain that just became non-empty joins every live view's ready set, due now.
local function announce_domain(spider, domain, priority, now, view_timeout_ms)
  -- the domain set keeps the priority tie-break, so a new view seeded from it keeps it too
  redis.call('ZADD', spider_key('domains', spider), ready_score(0, priority), domain)
  local score = ready_score(now, priority)
  for _, view in ipairs(live_views(spider, now, view_timeout_ms)) do
    redis.call('ZADD', ready_key(spider, view), score, domain)
  end
end

-- The domain's head got a higher priority: move its tie-break, keep its time.
local function promote_domain(spider, domain, priority, now, view_timeout_ms)
  redis.call('ZADD', spider_key('domains', spider), 'XX', ready_score(0, priority), domain)
  for _, view in ipairs(live_views(spider, now, view_timeout_ms)) do
    local ready = ready_key(spider, view)
    local current = redis.call('ZSCORE', ready, domain)
    if current then
      redis.call('ZADD', ready, 'XX', ready_score(tonumber(current), priority), domain)
    end
  end
end

-- Crawls whose count hash lost a field (it may now be empty) or gained one (it may have been
-- empty) in this script call; settle_idle turns them into idle-index updates.
local emptied, filled = {}, {}

local function count_add(spider, crawl, field, amount)
  local key = crawl_key('counts', spider, crawl)
  local value = redis.call('HINCRBY', key, field, amount)
  if value <= 0 then
    redis.call('HDEL', key, field)
    emptied[spider .. '\0' .. crawl] = {spider, crawl}
  elseif value == amount then
    filled[spider .. '\0' .. crawl] = {spider, crawl}
  end
end

-- The crawls idle index (frontier:crawls:idle): member '<spiderid>\t<crawlid>' scored by the
-- ms its count hash became empty (nothing queued, nothing leased). A crawl whose hash lost a
-- field and is now empty joins it (re-scored: idleness must be continuous); one whose hash
-- gained a field leaves it. One EXISTS per crawl that lost a field; no read otherwise.
-- Called at the end of every script that changes counts, except pop (every crawl a pop
-- decrements also gains a lease, so it never empties one, and it only dispatches from crawls
-- with queued requests, which are not idle).
local function idle_member(spider, crawl)
  return spider .. '\t' .. crawl
end

local function settle_idle(idle_key, now)
  for id, entry in pairs(emptied) do
    if redis.call('EXISTS', crawl_key('counts', entry[1], entry[2])) == 0 then
      redis.call('ZADD', idle_key, now, idle_member(entry[1], entry[2]))
      filled[id] = nil
    end
  end
  for _, entry in pairs(filled) do redis.call('ZREM', idle_key, idle_member(entry[1], entry[2])) end
  emptied, filled = {}, {}
end

-- A crawl's status (<spiderid>:crawl:<crawlid>:state field 'status'): running, complete,
-- stopped or expired; false when the crawl has no state. Read once per script call.
local ENDED = {complete = true, stopped = true, expired = true}
local statuses = {}
local function crawl_status(spider, crawl)
  local id = spider .. '\0' .. crawl
  local status = statuses[id]
  if status == nil then
    status = redis.call('HGET', crawl_key('state', spider, crawl), 'status') or false
    statuses[id] = status
  end
  return status
end

-- TTL ms for a write to a key of the crawl: ``running_ms`` while it runs (or has no state);
-- once it ended, what is left of its state's life, so its keys all go with its state.
local function crawl_ttl_ms(spider, crawl, running_ms)
  if ENDED[crawl_status(spider, crawl)] then
    local left = redis.call('PTTL', crawl_key('state', spider, crawl))
    if left > 0 then return left end
  end
  return running_ms
end

-- Adds counts to the crawl's URL funnel: ``fields`` is {field = n, ...}; the TTL is
-- ``running_ms`` (DUPEFILTER_TIMEOUT) while the crawl runs, else its state's (above). A
-- 'filtered:<reason>' count is also added to the cluster's lifetime totals
-- (stats:crawl-funnel:filtered, field '<spiderid>:<reason>', no TTL).
local function add_funnel(spider, crawl, fields, running_ms)
  local key = crawl_key('funnel', spider, crawl)
  for field, count in pairs(fields) do
    redis.call('HINCRBY', key, field, count)
    if string.sub(field, 1, 9) == 'filtered:' then
      redis.call('HINCRBY', TEMPLATES['filtered_totals'], spider .. ':' .. string.sub(field, 10), count)
    end
  end
  redis.call('PEXPIRE', key, crawl_ttl_ms(spider, crawl, running_ms))
end

-- Per-script memo of a batch enqueue: index keys known to be non-empty, and
-- queued counts summed per crawl-counts field (written once by flush_counts).
local function new_batch()
  return {nonempty = {}, counts = {}}
end

local function flush_counts(batch)
  for _, entry in pairs(batch.counts) do count_add(entry[1], entry[2], entry[3], entry[4]) end
end

local function add_count(batch, spider, crawl, field, amount)
  amount = amount or 1
  if batch == nil then return count_add(spider, crawl, field, amount) end
  local id = spider .. '\0' .. crawl .. '\0' .. field
  local entry = batch.counts[id]
  if entry then entry[4] = entry[4] + amount else batch.counts[id] = {spider, crawl, field, amount} end
end

-- Queues an encoded item "<seq> <json>" (at the head for a returned lease).
-- ``batch`` (optional, from new_batch) skips re-checking indexes this script
-- already filled and defers count writes to flush_counts.
-- Returns 1 when the domain had nothing queued before, else 0.
local function push_item(spider, domain, priority, crawl, item, at_head, now, view_timeout_ms, batch)
  local index = domain_index_key(spider, domain)
  local member = priority .. '|' .. crawl
  local sub = subqueue_key(spider, domain, priority, crawl)
  local was_empty = not (batch and batch.nonempty[index]) and redis.call('EXISTS', index) == 0
  if batch then batch.nonempty[index] = true end
  local length
  if at_head then length = redis.call('LPUSH', sub, item) else length = redis.call('RPUSH', sub, item) end
  if at_head or length == 1 then
    redis.call('ZADD', index, index_score(priority, item_seq(item)), member)
  end
  add_count(batch, spider, crawl, domain .. '|' .. priority)
  if was_empty then
    announce_domain(spider, domain, priority, now, view_timeout_ms)
    return 1
  end
  if (at_head or length == 1) and redis.call('ZRANK', index, member) == 0 then
    promote_domain(spider, domain, priority, now, view_timeout_ms)
  end
  return 0
end

-- Puts a leased item back: same place when delta is 0, else at the tail of the
-- priority+delta sub-queue with a new sequence number. Leases of a blacklisted
-- crawl are dropped. Returns 1 when requeued, 0 when dropped or unknown.
local function requeue_lease(leases, lease_items, id, delta, now, view_timeout_ms)
  local record = redis.call('HGET', lease_items, id)
  if not record then return 0 end
  redis.call('HDEL', lease_items, id)
  redis.call('ZREM', leases, id)
  local spider, domain, priority, crawl, item = cmsgpack.unpack(record)
  count_add(spider, crawl, LEASED_FIELD, -1)
  if redis.call('SISMEMBER', spider_key('blacklist', spider), crawl) == 1 then return 0 end
  if delta ~= 0 then
    local seq = redis.call('INCR', spider_key('seq', spider))
    -- new sequence number; the enqueue time (':<base 36 ms>', absent on older items) stays
    local rest = string.find(item, '[: ]')
    item = seq .. string.sub(item, rest)
  end
  push_item(spider, domain, priority + delta, crawl, item, delta == 0, now, view_timeout_ms)
  wake(spider, 1)
  return 1
end

-- Throttle of a domain: limit, window ms (send allowance included; 0 = unthrottled) and
-- whether it is moderated. The domain's override in the config HASH (JSON window, hits,
-- scale, moderated) wins over defaults {hits, window_ms, moderated, allowance_ms}.
-- Cached per script call.
local throttle_cache = {}
local any_throttle_config = nil   -- HLEN of the config, read once per call
local function domain_throttle(config_key, domain, defaults)
  local cached = throttle_cache[domain]
  if cached then return cached[1], cached[2], cached[3] end
  local hits, window_ms, scale = defaults.hits, defaults.window_ms, 1
  local moderated = defaults.moderated
  if any_throttle_config == nil then any_throttle_config = redis.call('HLEN', config_key) > 0 end
  local raw = any_throttle_config and redis.call('HGET', config_key, domain)
  if raw then
    local ok, config = pcall(cjson.decode, raw)
    if ok and type(config) == 'table' then
      hits = tonumber(config.hits) or hits
      window_ms = (tonumber(config.window) or window_ms / 1000) * 1000
      scale = tonumber(config.scale) or 1
      if type(config.moderated) == 'boolean' then moderated = config.moderated end
    end
  end
  local limit = math.floor(hits * math.max(0, math.min(1, scale)))
  if window_ms > 0 then window_ms = window_ms + defaults.allowance_ms end
  throttle_cache[domain] = {limit, window_ms, moderated}
  return limit, window_ms, moderated
end

-- When the domain may dispatch next. Moderated: window/limit after the last dispatch
-- (throttle_time). Otherwise an exact sliding window: a full window after the limit-th most
-- recent dispatch (throttle_window LIST, oldest first).
local function next_allowed(window_key, time_key, limit, window_ms, moderated, now)
  if window_ms <= 0 then return now end
  if moderated then
    local last = redis.call('GET', time_key)
    if not last then return now end
    return tonumber(last) + window_ms / limit
  end
  local kth = redis.call('LINDEX', window_key, -limit)
  if not kth then return now end
  return tonumber(kth) + window_ms
end

-- A domain's entry in a ready ZSET moves to allowed_ms when that is later than its score,
-- keeping its priority fraction (waiting crawlers then do not wake for it early).
local function push_ready_later(ready_key, domain, allowed_ms)
  local score = redis.call('ZSCORE', ready_key, domain)
  if not score then return end
  score = tonumber(score)
  local whole = math.floor(score)
  if allowed_ms > whole then
    redis.call('ZADD', ready_key, 'XX', math.ceil(allowed_ms) + (score - whole), domain)
  end
end

local function throttle_ttl_ms(window_ms)
  return math.floor(2 * window_ms) + 60000
end

local function record_dispatch(window_key, time_key, limit, window_ms, moderated, now)
  if window_ms <= 0 then return end
  if moderated then
    redis.call('SET', time_key, now, 'PX', throttle_ttl_ms(window_ms))
    return
  end
  redis.call('RPUSH', window_key, now)
  redis.call('LTRIM', window_key, -limit, -1)
  redis.call('PEXPIRE', window_key, throttle_ttl_ms(window_ms))
end

-- Re-crawls (docs/architecture.md, "Re-crawls"). A scheduled URL waits in a due bucket of its
-- crawl (<spiderid>:crawl:<crawlid>:due:<bucket ms>, a LIST) listed in the crawl's due index
-- (ZSET bucket -> ms); the spider's recrawl ZSET holds each crawl's earliest bucket, so a pop
-- finds due URLs with one read whatever their number. A record is '<tail id><state>\t<url>':
-- the url as its JSON string, the crawler's state (opaque here), and the id (8 hex digits) of
-- what the crawl's URLs share, stored once in the crawl's tails HASH as
-- '<domain>\t<priority>\t<item after the url>'. The counts hash field '~scheduled' counts the
-- crawl's records, so a crawl with a schedule never looks idle (no 'complete' until it ends).
local SCHEDULED_FIELD = '~scheduled'
local TAIL_ID_CHARS = 8

-- The url of an item JSON '{"u":"...",...}' as its JSON string, and what follows it; nil when
-- the item does not start with its url.
local function split_url(json)
  if string.sub(json, 1, 6) ~= '{"u":"' then return nil end
  local i = 7
  while true do
    local c = string.sub(json, i, i)
    if c == '\\' then i = i + 2
    elseif c == '"' then return string.sub(json, 6, i), string.sub(json, i + 1)
    elseif c == '' then return nil
    else i = i + 1 end
  end
end

local function due_bucket_key(spider, crawl, bucket)
  return fill(crawl_key('due_bucket', spider, crawl), '\7', bucket)
end

-- Tail ids given out in this call: '<tails key>\0<shared>' -> id (false: no id, write inline).
local tail_ids = {}
local function tail_id(tails, shared)
  local memo = tails .. '\0' .. shared
  local id = tail_ids[memo]
  if id ~= nil then return id end
  id = string.sub(redis.sha1hex(shared), 1, TAIL_ID_CHARS)
  if redis.call('HSETNX', tails, id, shared) == 0 and redis.call('HGET', tails, id) ~= shared then
    id = false   -- two shared parts with one id (32 bits): this one's records carry it inline
  end
  tail_ids[memo] = id
  return id
end

-- Schedules a leased item ('<head> <json>') of the crawl to be queued again at bucket_ms with
-- the crawler's ``state``. Returns 1.
local function schedule_revisit(spider, domain, priority, crawl, item, state, bucket_ms)
  local json = string.sub(item, (string.find(item, ' ', 1, true) or 0) + 1)
  local url, tail = split_url(json)
  local record
  local id = url and tail_id(crawl_key('tails', spider, crawl), domain .. '\t' .. priority .. '\t' .. tail)
  if id then
    record = id .. state .. '\t' .. url
  else
    record = '\t' .. domain .. '\t' .. priority .. '\t' .. state .. '\t' .. json
  end
  local bucket = tostring(bucket_ms)
  redis.call('RPUSH', due_bucket_key(spider, crawl, bucket), record)
  redis.call('ZADD', crawl_key('due', spider, crawl), bucket_ms, bucket)
  redis.call('ZADD', spider_key('recrawl', spider), 'LT', bucket_ms, crawl)
  return 1
end

-- Queues up to ``budget`` due records of the spider's crawls (due at or before ``now``) into
-- their domains' queues, like an enqueue without dedupe: the same throttle, priority and lease
-- path as any request. Items are '<seq>:<due ms, base 36>:<state> <json>'. A stopped crawl's
-- records are left to its purge. Returns how many were queued. Work: one ZRANGEBYSCORE when
-- nothing is due; else per bucket taken one LPOP (with count) plus one push per record.
local function queue_due(spider, now, budget, view_timeout_ms)
  local recrawl = spider_key('recrawl', spider)
  local moved_total, newly = 0, 0
  local batch = new_batch()
  local rounds = 0
  while budget > 0 and rounds < 64 do
    rounds = rounds + 1
    local crawl = redis.call('ZRANGEBYSCORE', recrawl, '-inf', now, 'LIMIT', 0, 1)[1]
    if not crawl then break end
    local index = crawl_key('due', spider, crawl)
    local stopped = redis.call('SISMEMBER', spider_key('blacklist', spider), crawl) == 1
    local bucket = not stopped and redis.call('ZRANGEBYSCORE', index, '-inf', now, 'LIMIT', 0, 1)[1]
    if bucket then
      local key = due_bucket_key(spider, crawl, bucket)
      local records = redis.call('LPOP', key, budget) or {}
      if redis.call('EXISTS', key) == 0 then redis.call('ZREM', index, bucket) end
      local stamp = ':' .. base36(tonumber(bucket)) .. ':'
      local seq_key = spider_key('seq', spider)
      local seq = redis.call('INCRBY', seq_key, #records) - #records
      local tails = crawl_key('tails', spider, crawl)
      local shared_parts = {}
      for _, record in ipairs(records) do
        seq = seq + 1
        local domain, priority, state, json
        if string.sub(record, 1, 1) == '\t' then
          domain, priority, state, json = string.match(record, '^\t([^\t]*)\t([^\t]*)\t([^\t]*)\t(.*)$')
        else
          local id = string.sub(record, 1, TAIL_ID_CHARS)
          local tab = string.find(record, '\t', TAIL_ID_CHARS + 1, true)
          state = string.sub(record, TAIL_ID_CHARS + 1, tab - 1)
          local shared = shared_parts[id]
          if shared == nil then
            shared = redis.call('HGET', tails, id) or false
            shared_parts[id] = shared
          end
          if shared then
            local tail
            domain, priority, tail = string.match(shared, '^([^\t]*)\t([^\t]*)\t(.*)$')
            json = '{"u":' .. string.sub(record, tab + 1) .. tail
          end
        end
        if json then
          newly = newly + push_item(spider, domain, tonumber(priority), crawl,
                                    seq .. stamp .. state .. ' ' .. json, false, now, view_timeout_ms, batch)
          moved_total = moved_total + 1
        end
      end
      budget = budget - #records
      flush_counts(batch)
      batch = new_batch()
      count_add(spider, crawl, SCHEDULED_FIELD, -#records)
    end
    local following = not stopped and redis.call('ZRANGE', index, 0, 0, 'WITHSCORES')
    if following and following[1] then
      redis.call('ZADD', recrawl, following[2], crawl)
    else
      redis.call('ZREM', recrawl, crawl)
    end
  end
  if newly > 0 then wake(spider, newly) end
  return moved_total
end
