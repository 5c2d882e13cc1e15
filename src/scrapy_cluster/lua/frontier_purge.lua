-- frontier_purge.lua: one bounded chunk of removing a crawl's requests; call until it says 'done'.
-- KEYS[1]  crawl blacklist SET (<spiderid>:blacklist)
-- KEYS[2]  the spider's non-empty domains ZSET
-- KEYS[3]  the crawl's app SET          KEYS[4]  the crawl's counts HASH
-- KEYS[5]  leases ZSET                  KEYS[6]  lease records HASH
-- KEYS[7]  crawls idle ZSET (frontier:crawls:idle)
-- KEYS[8]  blacklist ages ZSET (<spiderid>:blacklist:since): crawlid -> ms blacklisted
-- ARGV[1]  key templates (JSON)         ARGV[2]  spiderid     ARGV[3]  crawlid
-- ARGV[4]  most requests removed in this chunk
-- ARGV[5]  phase: 'q<cursor>' (start with 'q0'), 'd' or 'l<cursor>', as returned by the
--          previous chunk
-- ARGV[6]  why: 'stopped' or 'expired'     ARGV[7]  CRAWL_STATE_TTL ms    ARGV[8]  now ms, or ''
-- ARGV[9]  CRAWL_BLACKLIST_TTL ms: members blacklisted longer ago are dropped (at most 100 per
--          call); 0 keeps them for ever
-- Returns {queued requests removed in this chunk, next phase ('done' when finished),
--          leases (in-flight requests) removed in this chunk, the crawl's status before}.
-- State: every chunk blacklists the crawl and, unless the crawl had already ended (complete,
-- stopped or expired: the first end wins, so a completed crawl never also gets 'stopped' or
-- 'expired'), sets its status to ARGV[6] with 'finished'. The last chunk removes it from the
-- idle index and starts the end-of-crawl TTLs: state and funnel CRAWL_STATE_TTL, dupefilter
-- at most that (its own DUPEFILTER_TIMEOUT when shorter).

local spider, crawl, budget, phase = ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]
local counts = KEYS[4]
local removed, leased = 0, 0
local state_ttl_ms = tonumber(ARGV[7])
local state = crawl_key('state', spider, crawl)
redis.call('SADD', KEYS[1], crawl)
local blacklist_ttl_ms = tonumber(ARGV[9]) or 0
if blacklist_ttl_ms > 0 then
  local now = now_ms(ARGV[8])
  redis.call('ZADD', KEYS[8], now, crawl)
  local old = redis.call('ZRANGEBYSCORE', KEYS[8], '-inf', now - blacklist_ttl_ms, 'LIMIT', 0, 100)
  if #old > 0 then
    redis.call('SREM', KEYS[1], unpack(old))
    redis.call('ZREM', KEYS[8], unpack(old))
  end
end
local prior = crawl_status(spider, crawl)
if not ENDED[prior] then
  redis.call('HSET', state, 'status', ARGV[6], 'finished', now_ms(ARGV[8]))
end
prior = prior or ''

local function drop_subqueue(field)
  local bar = string.find(field, '|[^|]*$')
  local domain, priority = string.sub(field, 1, bar - 1), tonumber(string.sub(field, bar + 1))
  local sub = subqueue_key(spider, domain, priority, crawl)
  local length = redis.call('LLEN', sub)
  if length > budget then
    redis.call('LTRIM', sub, 0, length - budget - 1)
    redis.call('HINCRBY', counts, field, -budget)
    return budget
  end
  redis.call('DEL', sub)
  redis.call('HDEL', counts, field)
  local index = domain_index_key(spider, domain)
  redis.call('ZREM', index, priority .. '|' .. crawl)
  if redis.call('EXISTS', index) == 0 then redis.call('ZREM', KEYS[2], domain) end
  return length
end

-- Phase 'q<cursor>': scan the count hash and drop sub-queues; a page cut short
-- by the budget is scanned again (dropped fields are gone, a trimmed one stays).
if string.sub(phase, 1, 1) == 'q' then
  local cursor = string.sub(phase, 2)
  local scan = redis.call('HSCAN', counts, cursor, 'COUNT', 100)
  local fields = scan[2]
  for i = 1, #fields, 2 do
    if budget <= 0 then return {removed, phase, 0, prior} end
    if fields[i] ~= LEASED_FIELD and fields[i] ~= SCHEDULED_FIELD then
      local taken = drop_subqueue(fields[i])
      removed, budget = removed + taken, budget - taken
    end
  end
  if budget <= 0 then return {removed, phase, 0, prior} end
  if scan[1] ~= '0' then return {removed, 'q' .. scan[1], 0, prior} end
  phase = 'd'
end

-- Phase 'd': drop the crawl's re-crawl schedule, up to ``budget`` URLs' buckets per chunk (a
-- pop queues none of a blacklisted crawl's URLs meanwhile, an ack schedules none).
if phase == 'd' then
  local index = crawl_key('due', spider, crawl)
  local buckets = redis.call('ZRANGE', index, 0, 99)
  for _, bucket in ipairs(buckets) do
    if budget <= 0 then return {removed, phase, 0, prior} end
    local key = due_bucket_key(spider, crawl, bucket)
    local length = redis.call('LLEN', key)
    redis.call('DEL', key)
    redis.call('ZREM', index, bucket)
    removed, budget = removed + length, budget - length
  end
  if redis.call('EXISTS', index) == 1 then return {removed, phase, 0, prior} end
  redis.call('DEL', crawl_key('tails', spider, crawl))
  redis.call('HDEL', counts, SCHEDULED_FIELD)
  redis.call('ZREM', spider_key('recrawl', spider), crawl)
  phase = 'l0'
end

-- Phase 'l<cursor>': drop the crawl's leases (the lease hash holds in-flight requests only).
local scan = redis.call('HSCAN', KEYS[6], string.sub(phase, 2), 'COUNT', math.max(budget, 10))
for i = 1, #scan[2], 2 do
  local id = scan[2][i]
  local lease_spider, _, _, lease_crawl = cmsgpack.unpack(scan[2][i + 1])
  if lease_spider == spider and lease_crawl == crawl then
    redis.call('HDEL', KEYS[6], id)
    redis.call('ZREM', KEYS[5], id)
    leased = leased + 1
  end
end
if scan[1] ~= '0' then return {removed, 'l' .. scan[1], leased, prior} end
redis.call('DEL', counts, crawl_key('held', spider, crawl))
redis.call('SREM', KEYS[3], crawl)
redis.call('ZREM', KEYS[7], idle_member(spider, crawl))
redis.call('PEXPIRE', state, state_ttl_ms)
redis.call('PEXPIRE', crawl_key('funnel', spider, crawl), state_ttl_ms)
local filter = crawl_key('dupefilter', spider, crawl)
local left = redis.call('PTTL', filter)
if left == -1 or left > state_ttl_ms then redis.call('PEXPIRE', filter, state_ttl_ms) end
return {removed, 'done', leased, prior}
