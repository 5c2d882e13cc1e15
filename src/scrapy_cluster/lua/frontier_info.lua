-- frontier_info.lua: queued/leased counts of one crawl or of every crawl of an app.
-- KEYS[1]  the app's crawl SET (<spiderid>:app:<appid>:crawls)
-- ARGV[1]  key templates (JSON, see frontier_lib.lua)
-- ARGV[2]  spiderid          ARGV[3]  crawlid, or '' for every crawl of the app
-- ARGV[4]  now ms, or ''
-- Returns {now ms, then per crawl: crawlid, {field, count, ...}, {due URLs, next due ms or ''}};
-- crawls with nothing left leave the app set. Reads the per-crawl count hashes and, for a
-- crawl with a re-crawl schedule, the head of its due index and the lengths of up to 100 of
-- its due buckets (the due count says '100 buckets or more' by being a lower bound); no queued
-- item is read.

local spider, only = ARGV[2], ARGV[3]
local crawls
if only ~= '' then crawls = {only} else crawls = redis.call('SMEMBERS', KEYS[1]) end
local now = now_ms(ARGV[4])
local out = {now}

local function schedule_of(crawl)
  local index = crawl_key('due', spider, crawl)
  local due = 0
  for _, bucket in ipairs(redis.call('ZRANGEBYSCORE', index, '-inf', now, 'LIMIT', 0, 100)) do
    due = due + redis.call('LLEN', due_bucket_key(spider, crawl, bucket))
  end
  local following = redis.call('ZRANGEBYSCORE', index, '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  return {due, following[2] or ''}
end

for _, crawl in ipairs(crawls) do
  local counts = redis.call('HGETALL', crawl_key('counts', spider, crawl))
  if #counts == 0 and only == '' then
    redis.call('SREM', KEYS[1], crawl)
  else
    local scheduled = false
    for i = 1, #counts, 2 do
      if counts[i] == SCHEDULED_FIELD then scheduled = true end
    end
    table.insert(out, crawl)
    table.insert(out, counts)
    table.insert(out, scheduled and schedule_of(crawl) or {0, ''})
  end
end
return out
