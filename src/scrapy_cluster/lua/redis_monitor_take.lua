-- redis_monitor_take.lua: a Redis Monitor takes a batch of jobs read from redis-monitor:jobs.
-- KEYS[1]   HASH of jobs being handled (redis-monitor:taken): job key -> stream entry id
-- KEYS[2..] the job keys (info:..., stop:..., statsrequest:..., zk:...)
-- ARGV[i]   the stream entry id that named KEYS[i + 1]
-- Returns one code per job: 1 new (the job key existed; it is deleted and recorded as taken by
-- this entry), 2 resume (this entry had taken it: its monitor died or retries it), 0 gone
-- (answered already, expired, or taken through another entry of the same key: skip it).

local out = {}
for i = 2, #KEYS do
  local key, entry = KEYS[i], ARGV[i - 1]
  if redis.call('EXISTS', key) == 1 then
    redis.call('DEL', key)
    redis.call('HSET', KEYS[1], key, entry)
    out[i - 1] = 1
  elseif redis.call('HGET', KEYS[1], key) == entry then
    out[i - 1] = 2
  else
    out[i - 1] = 0
  end
end
return out
