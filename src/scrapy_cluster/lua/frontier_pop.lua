-- frontier_pop.lua: hand out up to n requests whose domain throttle allows, in one round trip.
-- KEYS[1]  ready ZSET of this dispatch view (<spiderid>:ready:<view>)
-- KEYS[2]  views ZSET of the spider (<spiderid>:views)
-- KEYS[3]  non-empty domains ZSET of the spider (<spiderid>:domains)
-- KEYS[4]  domain throttle config HASH (domain-config:throttle)
-- KEYS[5]  domain blacklist SET (domain-config:blacklist)
-- KEYS[6]  leases ZSET, KEYS[7] lease records HASH, KEYS[8] lease id counter
-- KEYS[9]  paused domains HASH (domain-config:paused): domain -> ms until which it is not
--          dispatched (circuit breaker, Retry-After; a halt is 2^50). Its items stay queued; an
--          entry found over is removed.
-- ARGV[1]  key templates (JSON, see frontier_lib.lua; plus throttle_window/throttle_time of this view)
-- ARGV[2]  spiderid          ARGV[3]  view name
-- ARGV[4]  n (at most 1000)    ARGV[5]  now ms, or '' for Redis server time
-- ARGV[6]  lookahead: stale ready entries a pop may correct beyond n
-- ARGV[7]  default hits      ARGV[8]  default window ms (0 = unthrottled)
-- ARGV[9]  '1' moderated (default; a domain override may say otherwise)
-- ARGV[10] lease timeout ms
-- ARGV[11] recheck ms for paused or blacklisted domains
-- ARGV[12] send allowance ms, added to every window (a request may reach the site a little
--          after its dispatch; the window is counted from the dispatch)
-- Returns {now_ms, wait_ms (-1 nothing queued), then 6 per request: lease id, domain, priority,
-- crawlid, item, 1 when the domain is throttled (its slot may need a late-send restamp) else 0}.
-- Work per call is bounded by n + lookahead ready entries, whatever the number of domains.

local ready, views, domains = KEYS[1], KEYS[2], KEYS[3]
local spider, view, n = ARGV[2], ARGV[3], tonumber(ARGV[4])
local now = now_ms(ARGV[5])
local lookahead, default_hits, default_window_ms = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local moderated, lease_ms, recheck_ms = ARGV[9] == '1', tonumber(ARGV[10]), tonumber(ARGV[11])
local allowance_ms = tonumber(ARGV[12])
local any_paused = redis.call('HLEN', KEYS[9]) > 0

if not redis.call('ZSCORE', views, view) then
  -- a new (or pruned) view starts with every non-empty domain due; pops correct it lazily
  redis.call('DEL', ready)
  redis.call('ZUNIONSTORE', ready, 1, domains)
end
redis.call('ZADD', views, now, view)

local defaults = {hits = default_hits, window_ms = default_window_ms, moderated = moderated,
                  allowance_ms = allowance_ms}

-- Pops the head of the top sub-queue. Returns the item and the index's new top
-- member (worked out from the two leading members read before, no extra read).
local function take_item(domain, index, head, priority, crawl)
  local top = head[1]
  local sub = subqueue_key(spider, domain, priority, crawl)
  local item = redis.call('LPOP', sub)
  if not item then
    redis.call('ZREM', index, top)
    return nil
  end
  local new_top = head[3]
  local following = redis.call('LINDEX', sub, 0)
  if following then
    local score = index_score(priority, item_seq(following))
    redis.call('ZADD', index, score, top)
    if not new_top or score <= tonumber(head[4]) then new_top = top end
  else
    redis.call('ZREM', index, top)
  end
  count_add(spider, crawl, domain .. '|' .. priority, -1)
  return item, new_top
end

local function reschedule(domain, top, allowed_ms)
  if top then
    redis.call('ZADD', ready, ready_score(math.max(now, allowed_ms), parse_member(top)), domain)
  else
    redis.call('ZREM', ready, domain)
    redis.call('ZREM', domains, domain)
  end
end

-- True when the domain is paused: its ready entry is re-scored to the end of the pause, or
-- to the recheck if sooner (a resume touches the domain, so it is not waited for).
local function held_by_pause(domain, priority)
  if not any_paused then return false end
  local until_ms = tonumber(redis.call('HGET', KEYS[9], domain))
  if not until_ms then return false end
  if until_ms <= now then
    redis.call('HDEL', KEYS[9], domain)
    return false
  end
  redis.call('ZADD', ready, ready_score(math.min(until_ms, now + recheck_ms), priority), domain)
  return true
end

-- Returns {domain, priority, crawl, item} when dispatched, nil when the entry was corrected.
local function try_dispatch(domain)
  local index = domain_index_key(spider, domain)
  local head = redis.call('ZRANGE', index, 0, 1, 'WITHSCORES')
  local top = head[1]
  if not top then return reschedule(domain, nil, now) end
  local priority, crawl = parse_member(top)
  if held_by_pause(domain, priority) then return nil end
  local limit, window_ms, domain_moderated = domain_throttle(KEYS[4], domain, defaults)
  if limit <= 0 or redis.call('SISMEMBER', KEYS[5], domain) == 1 then
    redis.call('ZADD', ready, ready_score(now + recheck_ms, priority), domain)
    return nil
  end
  local window_key = fill(TEMPLATES.throttle_window, '\2', domain)
  local time_key = fill(TEMPLATES.throttle_time, '\2', domain)
  local allowed = next_allowed(window_key, time_key, limit, window_ms, domain_moderated, now)
  if allowed > now then
    redis.call('ZADD', ready, ready_score(math.ceil(allowed), priority), domain)
    return nil
  end
  local item, new_top = take_item(domain, index, head, priority, crawl)
  if not item then return nil end
  record_dispatch(window_key, time_key, limit, window_ms, domain_moderated, now)
  reschedule(domain, new_top,
             math.ceil(next_allowed(window_key, time_key, limit, window_ms, domain_moderated, now)))
  return {domain, priority, crawl, item, window_ms > 0 and 1 or 0}
end

local out = {now, 0}
local first_id = redis.call('INCRBY', KEYS[8], n) - n
local dispatched, examined = 0, 0
local due_below = '(' .. (now + 1)
local lease_deadlines, lease_records, leased_per_crawl = {}, {}, {}
local batch, position = {}, 1
while dispatched < n and examined < n + lookahead do
  if position > #batch then
    -- due domains in order, fetched in batches; a domain re-scored to now comes back in the next batch
    batch = redis.call('ZRANGEBYSCORE', ready, '-inf', due_below, 'LIMIT', 0, n + lookahead - examined)
    position = 1
    if #batch == 0 then break end
  end
  local domain = batch[position]
  position = position + 1
  examined = examined + 1
  local got = try_dispatch(domain)
  if got then
    dispatched = dispatched + 1
    local id = tostring(first_id + dispatched)
    table.insert(lease_deadlines, now + lease_ms)
    table.insert(lease_deadlines, id)
    table.insert(lease_records, id)
    table.insert(lease_records, cmsgpack.pack(spider, got[1], got[2], got[3], got[4]))
    leased_per_crawl[got[3]] = (leased_per_crawl[got[3]] or 0) + 1
    table.insert(out, id)
    for _, value in ipairs(got) do table.insert(out, value) end  -- the 5 of try_dispatch
  end
end
if dispatched > 0 then
  redis.call('ZADD', KEYS[6], unpack(lease_deadlines))
  redis.call('HSET', KEYS[7], unpack(lease_records))
  for crawl, count in pairs(leased_per_crawl) do count_add(spider, crawl, LEASED_FIELD, count) end
end
if dispatched < n then
  local first = redis.call('ZRANGE', ready, 0, 0, 'WITHSCORES')
  if first[1] then
    out[2] = math.max(0, math.floor(tonumber(first[2])) - now)
  else
    out[2] = -1
  end
end
return out
