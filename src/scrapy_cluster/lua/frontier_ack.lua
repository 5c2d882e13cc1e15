-- frontier_ack.lua: finish leased requests (they never return to a queue).
-- KEYS[1]  leases ZSET      KEYS[2]  lease records HASH
-- ARGV[1]  key templates (JSON, see frontier_lib.lua)
-- ARGV[2..] lease ids
-- Returns the number of leases that were still held.

local acked = 0
for i = 2, #ARGV do
  local record = redis.call('HGET', KEYS[2], ARGV[i])
  if record then
    redis.call('HDEL', KEYS[2], ARGV[i])
    redis.call('ZREM', KEYS[1], ARGV[i])
    local spider, _, _, crawl = cmsgpack.unpack(record)
    count_add(spider, crawl, LEASED_FIELD, -1)
    acked = acked + 1
  end
end
return acked
