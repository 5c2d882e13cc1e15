-- migration_mark_seen.lua: record URLs a crawl of the original system had already fetched in
-- our dupefilter of that crawl, as seen at depth 0 (scrapy-cluster migrate --seen-urls).
-- KEYS[1]  the crawl's dupefilter HASH (<spiderid>:dupefilter:<crawlid>)
-- ARGV[1]  dupefilter TTL ms (DUPEFILTER_TIMEOUT)
-- ARGV[2..] pairs: bucket field (3 hex digits), fingerprint (7 bytes), from
--           scrapy_cluster.frontier.codec.dupe_slot
-- Records are 8 bytes: 7 fingerprint bytes, then the smallest depth at which the crawl saw the
-- URL (the layout frontier_enqueue.lua reads). A fingerprint already recorded keeps its record;
-- a new one gets depth 0, so every later request of the URL in that crawl is a duplicate and
-- never a depth upgrade. Returns the number of fingerprints added.

local RECORD_BYTES = 8
local added = 0

local function recorded(value, fingerprint)
  local start = 1
  while true do
    local pos = string.find(value, fingerprint, start, true)
    if not pos then return false end
    if (pos - 1) % RECORD_BYTES == 0 then return true end
    start = pos + 1
  end
end

for i = 2, #ARGV, 2 do
  local bucket, fingerprint = ARGV[i], ARGV[i + 1]
  local value = redis.call('HGET', KEYS[1], bucket) or ''
  if not recorded(value, fingerprint) then
    redis.call('HSET', KEYS[1], bucket, value .. fingerprint .. '\0')
    added = added + 1
  end
end
if #ARGV > 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return added
