-- The gateway rate limit's two operations in one script, on Redis's clock (billing.limiter.redis_gcra;
-- the argument for why it holds is in docs/limiter.md). Numbers go back to Redis with %d: Lua's
-- default number format (%.14g) would round a microsecond clock.
--   pace: KEYS[1] TAT; ARGV: 'pace', interval_us, max_wait_us, wanted
--         -> {granted, wait_us} ({0, retry_us}: even the first slot is more than max_wait ahead)
--   use:  KEYS[2] log (sorted set: token -> grant + budget, us); ARGV: 'use', limit, token,
--         release token or '', budget_us
--         -> {1, now_us} granted and logged; {0, retry_us} a second's worth is already logged
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
if ARGV[1] == 'pace' then
  local interval = tonumber(ARGV[2])
  local max_wait = tonumber(ARGV[3])
  local wanted = tonumber(ARGV[4])
  local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
  local slot = tat
  if now > slot then slot = now end
  if slot - now > max_wait then
    return {0, slot - now - max_wait}
  end
  local granted = math.min(wanted, math.floor((max_wait - (slot - now)) / interval) + 1)
  local new_tat = slot + granted * interval
  redis.call('SET', KEYS[1], string.format('%d', new_tat), 'PX', math.floor((new_tat - now) / 1000) + 1000)
  return {granted, slot - now}
end
local limit = tonumber(ARGV[2])
local budget = tonumber(ARGV[5])
if ARGV[4] ~= '' then redis.call('ZREM', KEYS[2], ARGV[4]) end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', string.format('%d', now - 1000000))
if redis.call('ZCARD', KEYS[2]) >= limit then
  local oldest = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  return {0, tonumber(oldest[2]) + 1000000 - now}
end
redis.call('ZADD', KEYS[2], string.format('%d', now + budget), ARGV[3])
redis.call('PEXPIRE', KEYS[2], math.floor(budget / 1000) + 2000)
return {1, now}
