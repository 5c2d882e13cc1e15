-- frontier_ack.lua: finish leased requests (they never return to a queue), and write the
-- crawler's URL funnel counts in the same call.
-- KEYS[1]  leases ZSET      KEYS[2]  lease records HASH
-- KEYS[3]  crawls idle ZSET (frontier:crawls:idle)
-- ARGV[1]  key templates (JSON, see frontier_lib.lua)
-- ARGV[2]  now ms, or ''    ARGV[3]  funnel TTL ms of a running crawl (DUPEFILTER_TIMEOUT)
-- ARGV[4]  k, the number of lease ids    ARGV[5 .. 4 + k] lease ids
-- ARGV[5 + k ..] funnel counts, per crawl: spiderid, crawlid, number of fields m, then m pairs
--          field, count (added to <spiderid>:crawl:<crawlid>:funnel)
-- Returns the number of leases that were still held.
-- The funnel counts travel with the acknowledgement so that a crawl whose last lease is acked
-- has every count of its pages written in that same atomic step: completion detection (the
-- idle index, settled here) never sees a crawl idle while a crawler still holds its counts.

local now = now_ms(ARGV[2])
local funnel_ttl_ms, k = tonumber(ARGV[3]), tonumber(ARGV[4])
local acked = 0
local per_crawl = {}
-- per chunk of at most 1000 ids: one HMGET, one HDEL, one ZREM; then one HINCRBY per crawl
for first = 5, 4 + k, 1000 do
  local ids = {unpack(ARGV, first, math.min(first + 999, 4 + k))}
  local records = redis.call('HMGET', KEYS[2], unpack(ids))
  local held = {}
  for j, record in ipairs(records) do
    if record then
      held[#held + 1] = ids[j]
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
for _, entry in pairs(per_crawl) do count_add(entry[1], entry[2], LEASED_FIELD, -entry[3]) end
local i = 5 + k
while i <= #ARGV do
  local spider, crawl, m = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  local fields = {}
  for j = i + 3, i + 2 + 2 * m, 2 do fields[ARGV[j]] = tonumber(ARGV[j + 1]) end
  if m > 0 then add_funnel(spider, crawl, fields, funnel_ttl_ms) end
  i = i + 3 + 2 * m
end
settle_idle(KEYS[3], now)
return acked
