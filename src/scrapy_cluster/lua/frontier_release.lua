-- frontier_release.lua: return leased requests to their queues (crawler gave them back).
-- KEYS[1]  leases ZSET      KEYS[2]  lease records HASH
-- KEYS[3]  crawls idle ZSET (frontier:crawls:idle; settle_idle in frontier_lib.lua)
-- ARGV[1]  key templates (JSON, see frontier_lib.lua)
-- ARGV[2]  now ms, or ''    ARGV[3]  priority delta (0 = back at the head of its sub-queue)
-- ARGV[4]  view idle timeout ms
-- ARGV[5..] lease ids
-- Returns the number requeued (leases of blacklisted crawls are dropped, unknown ids ignored).

local now = now_ms(ARGV[2])
local delta, view_timeout_ms = tonumber(ARGV[3]), tonumber(ARGV[4])
local requeued = 0
for i = 5, #ARGV do
  requeued = requeued + requeue_lease(KEYS[1], KEYS[2], ARGV[i], delta, now, view_timeout_ms)
end
settle_idle(KEYS[3], now)
return requeued
