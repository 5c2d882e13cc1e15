-- frontier_reap.lua: return expired leases (their crawler died) to the head of their queues.
-- KEYS[1]  leases ZSET      KEYS[2]  lease records HASH
-- KEYS[3]  crawls idle ZSET (frontier:crawls:idle; settle_idle in frontier_lib.lua)
-- ARGV[1]  key templates (JSON, see frontier_lib.lua)
-- ARGV[2]  now ms, or ''    ARGV[3]  most leases handled in this call
-- ARGV[4]  view idle timeout ms
-- Returns {requeued, examined}.

local now = now_ms(ARGV[2])
local view_timeout_ms = tonumber(ARGV[4])
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[3]))
local requeued = 0
for _, id in ipairs(expired) do
  local before = requeued
  requeued = requeued + requeue_lease(KEYS[1], KEYS[2], id, 0, now, view_timeout_ms)
  if requeued == before then redis.call('ZREM', KEYS[1], id) end
end
settle_idle(KEYS[3], now)
return {requeued, #expired}
