-- frontier_complete.lua: take the crawls idle for the grace period, declare them complete,
-- for one Redis Monitor (ExpireMonitor's pattern: held, then confirmed).
-- KEYS[1]  crawls idle ZSET (frontier:crawls:idle): '<spiderid>\t<crawlid>' -> ms
-- KEYS[2]  redis-monitor:timeouts ZSET (a completed crawl's pending expiry is dropped)
-- ARGV[1]  key templates (JSON, see frontier_lib.lua; plus 'timeout')
-- ARGV[2]  now ms, or ''    ARGV[3]  grace ms (CRAWL_COMPLETE_GRACE_S)
-- ARGV[4]  hold ms (REDIS_LOCK_EXPIRATION)    ARGV[5]  CRAWL_STATE_TTL ms
-- ARGV[6]  most crawls taken
-- A member scored <= now - grace has had nothing queued and nothing leased since its score
-- (any count written since would have removed it). Per such member, atomically:
--  * counts present again (defensive) or status not running/complete: removed, skipped;
--  * status running: status 'complete', 'finished' = its score (the ms it became idle); the
--    crawl leaves its app's crawl set; its timeout key and redis-monitor:timeouts entry go
--    (it can no longer expire); TTLs: state and funnel CRAWL_STATE_TTL, dupefilter and held
--    list at most that; then it is held (below) and returned;
--  * status complete: a notice taken by a monitor that died before confirming; returned again.
-- Held: re-scored to now + hold - grace, so it is due again after `hold` unless the taker
-- confirms its notice (frontier_complete_done.lua) or the crawl runs again (an enqueue
-- removes it). So two monitors never both take a crawl, and a dead taker's notice is resent.
-- Returns {member, held score, appid, started ms, finished ms, {funnel field, count, ...}, ...}.

local now = now_ms(ARGV[2])
local grace_ms, hold_ms = tonumber(ARGV[3]), tonumber(ARGV[4])
local state_ttl_ms, most = tonumber(ARGV[5]), tonumber(ARGV[6])

local function cap_ttl(key)
  local left = redis.call('PTTL', key)
  if left == -1 or left > state_ttl_ms then redis.call('PEXPIRE', key, state_ttl_ms) end
end

local function end_crawl(spider, crawl, state)
  local app = redis.call('HGET', state, 'appid') or ''
  redis.call('PEXPIRE', state, state_ttl_ms)
  redis.call('PEXPIRE', crawl_key('funnel', spider, crawl), state_ttl_ms)
  cap_ttl(crawl_key('dupefilter', spider, crawl))
  cap_ttl(crawl_key('held', spider, crawl))
  redis.call('SREM', app_key(spider, app), crawl)
  local timeout = fill(fill(spider_key('timeout', spider), '\6', app), '\4', crawl)
  redis.call('DEL', timeout)
  redis.call('ZREM', KEYS[2], timeout)
end

local out = {}
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - grace_ms, 'WITHSCORES',
                       'LIMIT', 0, most)
for i = 1, #due, 2 do
  local member, idle_since = due[i], tonumber(due[i + 1])
  local tab = string.find(member, '\t', 1, true)
  local spider, crawl = string.sub(member, 1, tab - 1), string.sub(member, tab + 1)
  local state = crawl_key('state', spider, crawl)
  local status = crawl_status(spider, crawl)
  if redis.call('EXISTS', crawl_key('counts', spider, crawl)) == 1
      or (status ~= 'running' and status ~= 'complete') then
    redis.call('ZREM', KEYS[1], member)
  else
    if status == 'running' then
      redis.call('HSET', state, 'status', 'complete', 'finished', idle_since)
      end_crawl(spider, crawl, state)
    end
    local held = now + hold_ms - grace_ms
    redis.call('ZADD', KEYS[1], 'XX', held, member)
    local fields = redis.call('HMGET', state, 'appid', 'started', 'finished')
    table.insert(out, member)
    table.insert(out, held)
    table.insert(out, fields[1] or '')
    table.insert(out, fields[2] or '')
    table.insert(out, fields[3] or '')
    table.insert(out, redis.call('HGETALL', crawl_key('funnel', spider, crawl)))
  end
end
return out
