-- throttled_queue_acquire.lua: take one throttle slot for a queue if it has items and the throttle allows.
-- KEYS[1]  the queue (LIST or ZSET)
-- KEYS[2]  window key: LIST of the last `limit` pop times (ms)
-- KEYS[3]  moderation key: STRING, last pop time (ms)
-- ARGV[1]  now ms, or '' for Redis server time
-- ARGV[2]  limit       ARGV[3]  window ms
-- ARGV[4]  '1' moderated          ARGV[5]  '1' elastic        ARGV[6]  elastic buffer
-- Returns {1, 0} when a slot was taken, {0, ms until the next slot} when throttled,
-- {0, -1} when the queue is empty (no slot is taken then).
-- Elastic: a moderated queue that fell behind (fewer than limit - buffer pops in the
-- last window) may pop faster than window/limit, but never more than limit per window.

local now
if ARGV[1] ~= '' then now = tonumber(ARGV[1]) else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local limit, window_ms = tonumber(ARGV[2]), tonumber(ARGV[3])
local moderated, elastic, buffer = ARGV[4] == '1', ARGV[5] == '1', tonumber(ARGV[6])

local kind = redis.call('TYPE', KEYS[1])['ok']
local size = 0
if kind == 'list' then size = redis.call('LLEN', KEYS[1]) elseif kind == 'zset' then size = redis.call('ZCARD', KEYS[1]) end
if size == 0 then return {0, -1} end
if limit <= 0 then return {0, window_ms} end

local kth = redis.call('LINDEX', KEYS[2], -limit)
if kth and tonumber(kth) + window_ms > now then
  return {0, tonumber(kth) + window_ms - now}
end
if moderated then
  local last = redis.call('GET', KEYS[3])
  local next_ms = last and (tonumber(last) + window_ms / limit) or now
  if next_ms > now then
    local recent = 0
    if elastic then
      for _, at in ipairs(redis.call('LRANGE', KEYS[2], 0, -1)) do
        if tonumber(at) > now - window_ms then recent = recent + 1 end
      end
    end
    if not elastic or recent >= limit - buffer then
      return {0, math.ceil(next_ms - now)}
    end
  end
end
local ttl_ms = math.floor(2 * window_ms) + 60000
redis.call('RPUSH', KEYS[2], now)
redis.call('LTRIM', KEYS[2], -limit, -1)
redis.call('PEXPIRE', KEYS[2], ttl_ms)
redis.call('SET', KEYS[3], now, 'PX', ttl_ms)
return {1, 0}
