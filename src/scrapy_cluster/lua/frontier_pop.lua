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
-- ARGV[13] view idle timeout ms (SCHEDULER_QUEUE_TIMEOUT), for domains a due re-crawl refills
-- Re-crawls: first, up to n + lookahead URLs whose re-crawl is due join their domains' queues
-- (queue_due in frontier_lib.lua: one read when none is due); the wait also ends when the
-- spider's next re-crawl bucket is due.
-- Returns {now_ms, wait_ms (-1 nothing queued), then 6 per request: lease id, domain, priority,
-- crawlid, item, 1 when the domain is throttled (its slot may need a late-send restamp) else 0}.
-- Work per call is bounded by n + lookahead ready entries, whatever the number of domains.
-- Fairness: due domains are served in ready order, one request each per pass; an unthrottled
-- domain (window 0) takes its share of what is left of n at once (see take_items).

local ready, views, domains = KEYS[1], KEYS[2], KEYS[3]
local spider, view, n = ARGV[2], ARGV[3], tonumber(ARGV[4])
local now = now_ms(ARGV[5])
local lookahead, default_hits, default_window_ms = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local moderated, lease_ms, recheck_ms = ARGV[9] == '1', tonumber(ARGV[10]), tonumber(ARGV[11])
local allowance_ms = tonumber(ARGV[12])
queue_due(spider, now, n + lookahead, tonumber(ARGV[13]))
local any_paused = redis.call('HLEN', KEYS[9]) > 0

if redis.call('ZADD', views, now, view) == 1 then
  -- a new (or pruned) view starts with every non-empty domain due; pops correct it lazily
  redis.call('DEL', ready)
  redis.call('ZUNIONSTORE', ready, 1, domains)
end

local defaults = {hits = default_hits, window_ms = default_window_ms, moderated = moderated,
                  allowance_ms = allowance_ms}

-- Queued counts taken per crawl and field, written once at the end (count_add).
local taken = {}

-- After ``count`` items were taken off the top sub-queue (its head was head[1], the index's
-- second member head[3] with score head[4]): re-scores its index entry by its next item
-- ``following`` (or drops it when there is none) and counts the items off the crawl's queued
-- field. Returns the index's new top member, worked out with no extra read.
local function after_take(domain, index, head, priority, crawl, following, count)
  local top, new_top = head[1], head[3]
  if following then
    local score = index_score(priority, item_seq(following))
    redis.call('ZADD', index, score, top)
    if not new_top or score <= tonumber(head[4]) then new_top = top end
  else
    redis.call('ZREM', index, top)
  end
  local field = domain .. '|' .. priority
  local counts = taken[crawl]
  if counts == nil then
    counts = {}
    taken[crawl] = counts
  end
  counts[field] = (counts[field] or 0) - count
  return new_top
end

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
  return item, after_take(domain, index, head, priority, crawl, redis.call('LINDEX', sub, 0), 1)
end

-- Domain blacklist membership, read once per domain and call.
local blacklisted = {}
local any_blacklisted = nil
local function is_blacklisted(domain)
  if any_blacklisted == nil then any_blacklisted = redis.call('SCARD', KEYS[5]) > 0 end
  if not any_blacklisted then return false end
  local known = blacklisted[domain]
  if known == nil then
    known = redis.call('SISMEMBER', KEYS[5], domain) == 1
    blacklisted[domain] = known
  end
  return known
end

-- The throttle keys of a domain in this view, built once per domain and call.
local throttle_keys = {}
local function throttle_keys_of(domain)
  local pair = throttle_keys[domain]
  if pair == nil then
    pair = {fill(TEMPLATES.throttle_window, '\2', domain), fill(TEMPLATES.throttle_time, '\2', domain)}
    throttle_keys[domain] = pair
  end
  return pair[1], pair[2]
end

-- Up to k items off the head of the top sub-queue (an unthrottled domain's share of this
-- pop), as long as its head would still rank first in the index (the second member's score
-- is head[4]), so the index's order is kept: one LRANGE and one LTRIM instead of an LPOP and
-- an LINDEX per item. Returns the items and the index's new top, like take_item.
local function take_items(domain, index, head, priority, crawl, k)
  if k <= 1 then
    local item, new_top = take_item(domain, index, head, priority, crawl)
    if not item then return nil end
    return {item}, new_top
  end
  local top = head[1]
  local sub = subqueue_key(spider, domain, priority, crawl)
  local items = redis.call('LRANGE', sub, 0, k)
  if #items == 0 then
    redis.call('ZREM', index, top)
    return nil
  end
  local second = tonumber(head[4])
  local count = 1
  while count < k and count < #items do
    if second and index_score(priority, item_seq(items[count + 1])) > second then break end
    count = count + 1
  end
  redis.call('LTRIM', sub, count, -1)
  local taken_items = {}
  for i = 1, count do taken_items[i] = items[i] end
  return taken_items, after_take(domain, index, head, priority, crawl, items[count + 1], count)
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

-- Returns {domain, priority, crawl, items, throttled} when dispatched (one item, or up to
-- ``share`` for an unthrottled domain), nil when the entry was corrected.
local function try_dispatch(domain, share)
  local index = domain_index_key(spider, domain)
  local head = redis.call('ZRANGE', index, 0, 1, 'WITHSCORES')
  local top = head[1]
  if not top then return reschedule(domain, nil, now) end
  local priority, crawl = parse_member(top)
  if held_by_pause(domain, priority) then return nil end
  local limit, window_ms, domain_moderated = domain_throttle(KEYS[4], domain, defaults)
  if limit <= 0 or is_blacklisted(domain) then
    redis.call('ZADD', ready, ready_score(now + recheck_ms, priority), domain)
    return nil
  end
  local window_key, time_key = throttle_keys_of(domain)
  local allowed = next_allowed(window_key, time_key, limit, window_ms, domain_moderated, now)
  if allowed > now then
    redis.call('ZADD', ready, ready_score(math.ceil(allowed), priority), domain)
    return nil
  end
  local items, new_top = take_items(domain, index, head, priority, crawl,
                                    window_ms > 0 and 1 or share)
  if not items then return nil end
  record_dispatch(window_key, time_key, limit, window_ms, domain_moderated, now)
  reschedule(domain, new_top,
             math.ceil(next_allowed(window_key, time_key, limit, window_ms, domain_moderated, now)))
  return {domain, priority, crawl, items, window_ms > 0 and 1 or 0}
end

local out = {now, 0}
local dispatched, examined = 0, 0
local due_below = '(' .. (now + 1)
local lease_deadlines, lease_records, leased_per_crawl, dispatches = {}, {}, {}, {}
local batch, position = {}, 1
while dispatched < n and examined < n + lookahead do
  if position > #batch then
    -- due domains in order, fetched in batches; a domain re-scored to now comes back in the next batch
    batch = redis.call('ZRANGEBYSCORE', ready, '-inf', due_below, 'LIMIT', 0, n + lookahead - examined)
    position = 1
    if #batch == 0 then break end
  end
  local domain = batch[position]
  -- an unthrottled domain's share: what is left of n split over the due domains left here
  local share = math.ceil((n - dispatched) / (#batch - position + 1))
  position = position + 1
  examined = examined + 1
  local got = try_dispatch(domain, share)
  if got then
    table.insert(dispatches, got)
    dispatched = dispatched + #got[4]
    leased_per_crawl[got[3]] = (leased_per_crawl[got[3]] or 0) + #got[4]
  end
end
if dispatched > 0 then
  -- lease ids: one INCRBY for the call
  local id = redis.call('INCRBY', KEYS[8], dispatched) - dispatched
  for _, got in ipairs(dispatches) do
    local got_domain, priority, crawl, throttled = got[1], got[2], got[3], got[5]
    for _, item in ipairs(got[4]) do
      id = id + 1
      local lease = tostring(id)
      table.insert(lease_deadlines, now + lease_ms)
      table.insert(lease_deadlines, lease)
      table.insert(lease_records, lease)
      table.insert(lease_records, cmsgpack.pack(spider, got_domain, priority, crawl, item))
      table.insert(out, lease)
      table.insert(out, got_domain)
      table.insert(out, priority)
      table.insert(out, crawl)
      table.insert(out, item)
      table.insert(out, throttled)
    end
  end
  redis.call('ZADD', KEYS[6], unpack(lease_deadlines))
  redis.call('HSET', KEYS[7], unpack(lease_records))
  for crawl, count in pairs(leased_per_crawl) do count_add(spider, crawl, LEASED_FIELD, count) end
end
for crawl, fields in pairs(taken) do
  for field, amount in pairs(fields) do count_add(spider, crawl, field, amount) end
end
if dispatched < n then
  local first = redis.call('ZRANGE', ready, 0, 0, 'WITHSCORES')
  local wait = first[1] and math.max(0, math.floor(tonumber(first[2])) - now) or -1
  local due = redis.call('ZRANGE', spider_key('recrawl', spider), 0, 0, 'WITHSCORES')
  if due[1] then
    local due_wait = math.max(0, tonumber(due[2]) - now)
    if wait < 0 or due_wait < wait then wait = due_wait end
  end
  out[2] = wait
end
return out
