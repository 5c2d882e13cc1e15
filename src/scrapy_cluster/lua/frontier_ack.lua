-- frontier_ack.lua: finish leased requests (they never return to a queue), and write the
-- crawler's URL funnel counts in the same call.
-- KEYS[1]  leases ZSET      KEYS[2]  lease records HASH
-- KEYS[3]  crawls idle ZSET (frontier:crawls:idle)
-- ARGV[1]  key templates (JSON, see frontier_lib.lua)
-- ARGV[2]  now ms, or ''    ARGV[3]  funnel TTL ms of a running crawl (DUPEFILTER_TIMEOUT)
-- ARGV[4]  re-crawl bucket ms (FRONTIER_RECRAWL_BUCKET_MS)
-- ARGV[5]  k, the number of lease ids    ARGV[6 .. 5 + k] lease ids
-- ARGV[6 + k]  r, the number of re-crawls, then r triples: lease id (one of the k), delay ms,
--          state: the lease's request is scheduled to be queued again at the first bucket at or
--          after now + delay, carrying the state (see schedule_revisit in frontier_lib.lua),
--          unless its crawl was stopped or ended
-- then funnel counts, per crawl: spiderid, crawlid, number of fields m, then m pairs
--          field, count (added to <spiderid>:crawl:<crawlid>:funnel)
-- Returns the number of leases that were still held.
-- A crawl that schedules a URL keeps its dupefilter and funnel at least until that URL is due
-- plus their TTL, so links found on a refetched page are still deduplicated.
-- The funnel counts travel with the acknowledgement so that a crawl whose last lease is acked
-- has every count of its pages written in that same atomic step: completion detection (the
-- idle index, settled here) never sees a crawl idle while a crawler still holds its counts.

local now = now_ms(ARGV[2])
local funnel_ttl_ms, bucket_ms, k = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local revisits = tonumber(ARGV[6 + k])
local acked = 0
local per_crawl = {}
local kept = {}   -- lease id -> record, for the leases scheduled again
local wanted = {}
for i = 7 + k, 6 + k + 3 * revisits, 3 do wanted[ARGV[i]] = true end
-- per chunk of at most 1000 ids: one HMGET, one HDEL, one ZREM; then one HINCRBY per crawl
for first = 6, 5 + k, 1000 do
  local ids = {unpack(ARGV, first, math.min(first + 999, 5 + k))}
  local records = redis.call('HMGET', KEYS[2], unpack(ids))
  local held = {}
  for j, record in ipairs(records) do
    if record then
      held[#held + 1] = ids[j]
      if wanted[ids[j]] then kept[ids[j]] = record end
      local spider, _, _, crawl = cmsgpack.unpack(record)
      local id = spider .. '\0' .. crawl
      local entry = per_crawl[id]
      if entry == nil then per_crawl[id] = {spider, crawl, 1} else entry[3] = entry[3] + 1 end
    end
  end
  if #held > 0 then
    redis.call('HDEL', KEYS[2], unpack(held))
    redis.call('ZREM', KEYS[1], unpack(held))
    acked = acked + #held
  end
end
-- re-crawls: per crawl, one blacklist and status read, one count write, one TTL renewal
local schedules = {}   -- spider \0 crawl -> {spider, crawl, count, latest due ms} or false
for i = 7 + k, 6 + k + 3 * revisits, 3 do
  local record = kept[ARGV[i]]
  if record then
    local spider, domain, priority, crawl, item = cmsgpack.unpack(record)
    local id = spider .. '\0' .. crawl
    local entry = schedules[id]
    if entry == nil then
      entry = not ENDED[crawl_status(spider, crawl)]
        and redis.call('SISMEMBER', spider_key('blacklist', spider), crawl) == 0
        and {spider, crawl, 0, 0}
      schedules[id] = entry
    end
    if entry then
      local due = now + math.max(0, tonumber(ARGV[i + 1]))
      local bucket = math.ceil(due / bucket_ms) * bucket_ms
      entry[3] = entry[3] + schedule_revisit(spider, domain, priority, crawl, item, ARGV[i + 2], bucket)
      entry[4] = math.max(entry[4], bucket)
    end
  end
end
for _, entry in pairs(schedules) do
  if entry then count_add(entry[1], entry[2], SCHEDULED_FIELD, entry[3]) end
end
for _, entry in pairs(per_crawl) do count_add(entry[1], entry[2], LEASED_FIELD, -entry[3]) end
local i = 7 + k + 3 * revisits
while i <= #ARGV do
  local spider, crawl, m = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  local fields = {}
  for j = i + 3, i + 2 + 2 * m, 2 do fields[ARGV[j]] = tonumber(ARGV[j + 1]) end
  if m > 0 then add_funnel(spider, crawl, fields, funnel_ttl_ms) end
  i = i + 3 + 2 * m
end
for _, entry in pairs(schedules) do
  if entry then
    local keep_ms = entry[4] - now + funnel_ttl_ms
    for _, name in ipairs({'dupefilter', 'funnel'}) do
      local key = crawl_key(name, entry[1], entry[2])
      local left = redis.call('PTTL', key)
      if left >= 0 and left < keep_ms then redis.call('PEXPIRE', key, keep_ms) end
    end
  end
end
settle_idle(KEYS[3], now)
return acked
