-- frontier_late_slot.lua: a fresh throttle slot for a request about to leave a crawler more
-- than the send allowance after its dispatch. Its dispatch-time slot is stale: another
-- request of the domain may have been dispatched (and sent) since, so going out now could put
-- two requests closer together than the throttle allows. The request takes a slot at the
-- current time if the throttle has one, else it is told how long to wait and asks again.
-- KEYS[1]  domain throttle config HASH (domain-config:throttle)
-- KEYS[2]  ready ZSET of the crawler's dispatch view (a taken slot re-scores its domain)
-- ARGV[1]  key templates (JSON; throttle_window/throttle_time of the crawler's view)
-- ARGV[2]  default hits    ARGV[3]  default window ms    ARGV[4]  '1' moderated
-- ARGV[5]  send allowance ms    ARGV[6]  now ms ('' = Redis TIME)
-- ARGV[7]  domain    ARGV[8]  dispatch ms of the request (its stale slot)
-- Returns 0 when the slot was taken (send now), else the ms to wait before asking again.
-- Moderated: allowed when the last slot is the request's own or window/limit old; the last
-- slot becomes now. Sliding window: the stale entry is left out, then allowed while fewer
-- than `limit` entries are less than a window old; the stale entry is replaced by now. An
-- unthrottled or paused domain needs no slot (0).

local defaults = {hits = tonumber(ARGV[2]), window_ms = tonumber(ARGV[3]),
                  moderated = ARGV[4] == '1', allowance_ms = tonumber(ARGV[5])}
local now = now_ms(ARGV[6])
local domain, dispatched = ARGV[7], tonumber(ARGV[8])
local limit, window_ms, moderated = domain_throttle(KEYS[1], domain, defaults)
if window_ms <= 0 or limit <= 0 then return 0 end
local window_key = fill(TEMPLATES.throttle_window, '\2', domain)
local time_key = fill(TEMPLATES.throttle_time, '\2', domain)

if moderated then
  local last = tonumber(redis.call('GET', time_key) or '0')
  local allowed = last + window_ms / limit
  if last ~= dispatched and now < allowed then return math.ceil(allowed - now) end
  redis.call('SET', time_key, now, 'PX', throttle_ttl_ms(window_ms))
  push_ready_later(KEYS[2], domain, now + window_ms / limit)
  return 0
end

local others, removed = {}, false
for _, value in ipairs(redis.call('LRANGE', window_key, 0, -1)) do
  local at = tonumber(value)
  if not removed and at == dispatched then removed = true else others[#others + 1] = at end
end
if #others >= limit then
  local allowed = others[#others - limit + 1] + window_ms
  if now < allowed then return math.ceil(allowed - now) end
end
others[#others + 1] = now
table.sort(others)
while #others > limit do table.remove(others, 1) end
redis.call('DEL', window_key)
redis.call('RPUSH', window_key, unpack(others))
redis.call('PEXPIRE', window_key, throttle_ttl_ms(window_ms))
push_ready_later(KEYS[2], domain, next_allowed(window_key, time_key, limit, window_ms, false, now))
return 0
