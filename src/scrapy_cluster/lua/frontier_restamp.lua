-- frontier_restamp.lua: move the throttle slots of requests that left a crawler late (a
-- robots.txt lookup, a full downloader) from their dispatch to the moment they were sent,
-- so the site never sees more than the limit in a window.
-- KEYS[1]  domain throttle config HASH (domain-config:throttle)
-- KEYS[2]  ready ZSET of the crawler's dispatch view (a moved slot re-scores its domain)
-- ARGV[1]  key templates (JSON; throttle_window/throttle_time of the crawler's view)
-- ARGV[2]  default hits    ARGV[3]  default window ms    ARGV[4]  '1' moderated
-- ARGV[5]  send allowance ms
-- ARGV[6..] triples: domain, dispatch ms, sent ms (sent > dispatch)
-- Returns how many slots moved. Moderated: the last-dispatch time becomes the later of itself
-- and the send. Sliding window: the entry of the dispatch becomes the send, kept in order; an
-- entry already trimmed (older than the last `limit` dispatches) needs no change. The domain's
-- ready entry moves to its new next-allowed ms (keeping its priority fraction), so waiting
-- crawlers do not wake for it early.

local defaults = {hits = tonumber(ARGV[2]), window_ms = tonumber(ARGV[3]),
                  moderated = ARGV[4] == '1', allowance_ms = tonumber(ARGV[5])}

local function move_window_entry(window_key, dispatched, sent)
  local entries = redis.call('LRANGE', window_key, 0, -1)
  local found = false
  for i, value in ipairs(entries) do
    if not found and tonumber(value) == dispatched then
      entries[i] = sent
      found = true
    else
      entries[i] = tonumber(value)
    end
  end
  if not found then return 0 end
  table.sort(entries)
  local ttl = redis.call('PTTL', window_key)
  redis.call('DEL', window_key)
  redis.call('RPUSH', window_key, unpack(entries))
  if ttl > 0 then redis.call('PEXPIRE', window_key, ttl) end
  return 1
end

local moved = 0
for i = 6, #ARGV, 3 do
  local domain, dispatched, sent = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  local limit, window_ms, moderated = domain_throttle(KEYS[1], domain, defaults)
  if window_ms > 0 and limit > 0 and sent > dispatched then
    local window_key = fill(TEMPLATES.throttle_window, '\2', domain)
    local time_key = fill(TEMPLATES.throttle_time, '\2', domain)
    local changed = 0
    if moderated then
      local last = tonumber(redis.call('GET', time_key) or '0')
      if sent > last then
        redis.call('SET', time_key, sent, 'PX', throttle_ttl_ms(window_ms))
        changed = 1
      end
    else
      changed = move_window_entry(window_key, dispatched, sent)
    end
    if changed == 1 then
      push_ready_later(KEYS[2], domain, next_allowed(window_key, time_key, limit, window_ms, moderated, sent))
      moved = moved + 1
    end
  end
end
return moved
