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
for i = 5, 4 + k do
  local record = redis.call('HGET', KEYS[2], ARGV[i])
  if record then
    redis.call('HDEL', KEYS[2], ARGV[i])
    redis.call('ZREM', KEYS[1], ARGV[i])
    local spider, _, _, crawl = cmsgpack.unpack(record)
    count_add(spider, crawl, LEASED_FIELD, -1)
    acked = acked + 1
  end
end
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
