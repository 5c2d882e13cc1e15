-- frontier_complete_done.lua: a Redis Monitor delivered the complete notices it took.
-- KEYS[1]  crawls idle ZSET (frontier:crawls:idle)
-- ARGV[1]  key templates (JSON; unused)
-- ARGV[2..] pairs: member, the held score frontier_complete.lua gave it
-- A member still at its held score leaves the index; one re-scored since (the crawl ran again
-- and became idle again) stays, to complete again.
-- Returns how many were removed.

local removed = 0
for i = 2, #ARGV, 2 do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if score and tonumber(score) == tonumber(ARGV[i + 1]) then
    redis.call('ZREM', KEYS[1], ARGV[i])
    removed = removed + 1
  end
end
return removed
