-- frontier_info.lua: queued/leased counts of one crawl or of every crawl of an app.
-- KEYS[1]  the app's crawl SET (<spiderid>:app:<appid>:crawls)
-- ARGV[1]  key templates (JSON, see frontier_lib.lua)
-- ARGV[2]  spiderid          ARGV[3]  crawlid, or '' for every crawl of the app
-- Returns {crawlid, {field, count, ...}, ...}; crawls with nothing left leave the app set.
-- Reads the per-crawl count hashes only; no queued item is read.

local spider, only = ARGV[2], ARGV[3]
local crawls
if only ~= '' then crawls = {only} else crawls = redis.call('SMEMBERS', KEYS[1]) end
local out = {}
for _, crawl in ipairs(crawls) do
  local counts = redis.call('HGETALL', crawl_key('counts', spider, crawl))
  if #counts == 0 and only == '' then
    redis.call('SREM', KEYS[1], crawl)
  else
    table.insert(out, crawl)
    table.insert(out, counts)
  end
end
return out
