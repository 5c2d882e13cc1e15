-- crawler_crawl_delay.lua: slow a domain cluster-wide to its robots.txt Crawl-delay, never speed it up.
-- KEYS[1]  domain throttle config HASH (domain-config:throttle): domain -> JSON {window, hits, scale}
-- ARGV[1]  domain             ARGV[2]  crawl delay in seconds (> 0)
-- ARGV[3]  default hits       ARGV[4]  default window in seconds (0 = unthrottled)
-- Returns 1 when the domain's interval was raised to the delay, 0 when it was already as slow.

local domain, delay_s = ARGV[1], tonumber(ARGV[2])
local hits, window_s, scale = tonumber(ARGV[3]), tonumber(ARGV[4]), 1
local raw = redis.call('HGET', KEYS[1], domain)
local config = {}
if raw then
  local ok, decoded = pcall(cjson.decode, raw)
  if ok and type(decoded) == 'table' then
    config = decoded
    hits = tonumber(config.hits) or hits
    window_s = tonumber(config.window) or window_s
    scale = tonumber(config.scale) or 1
  end
end
local allowed = math.floor(hits * math.max(0, math.min(1, scale)))
if window_s > 0 and allowed > 0 and window_s / allowed >= delay_s then
  return 0
end
if window_s > 0 and allowed <= 0 then
  return 0  -- paused by its configuration: already slower than any delay
end
config.window, config.hits, config.scale, config.crawl_delay = delay_s, 1, 1, delay_s
redis.call('HSET', KEYS[1], domain, cjson.encode(config))
return 1
