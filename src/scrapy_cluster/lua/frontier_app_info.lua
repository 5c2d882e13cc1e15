-- frontier_app_info.lua: every crawl of an app, summarised per domain, as one JSON document.
-- KEYS[1]  the app's crawl SET (<spiderid>:app:<appid>:crawls)
-- ARGV[1]  key templates (JSON, see frontier_lib.lua)     ARGV[2]  spiderid
-- Returns JSON {crawlid: {"domains": {domain: [total, low priority, high priority]},
--                         "leased": n}}; crawls with nothing left leave the app set.
-- Summing here (not in the client) keeps the reply to one entry per domain and crawl, and
-- JSON decodes in one call: the app-level info of 100,000 requests stays in milliseconds.

local spider = ARGV[2]
local out = {}
for _, crawl in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local counts = redis.call('HGETALL', crawl_key('counts', spider, crawl))
  if #counts == 0 then
    redis.call('SREM', KEYS[1], crawl)
  else
    local domains, leased = {}, 0
    for i = 1, #counts, 2 do
      local field, count = counts[i], tonumber(counts[i + 1])
      if field == LEASED_FIELD then
        leased = leased + count
      else
        local bar = string.find(field, '|[^|]*$')
        local domain, priority = string.sub(field, 1, bar - 1), tonumber(string.sub(field, bar + 1))
        local known = domains[domain]
        if known then
          known[1] = known[1] + count
          known[2] = math.min(known[2], priority)
          known[3] = math.max(known[3], priority)
        else
          domains[domain] = {count, priority, priority}
        end
      end
    end
    out[crawl] = {domains = domains, leased = leased}
  end
end
if next(out) == nil then return '{}' end
return cjson.encode(out)
