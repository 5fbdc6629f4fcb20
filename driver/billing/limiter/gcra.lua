-- The gateway rate limit's two operations in one script, on Redis's clock (billing.limiter.redis_gcra;
-- the argument for why it holds is in docs/limiter.md). Numbers go back to Redis with %d: Lua's
-- default number format (%.14g) would round a microsecond clock.
--   pace: KEYS[1] TAT; ARGV: 'pace', interval_us, max_wait_us, wanted
--         -> {granted, wait_us} ({0, retry_us}: even the first slot is more than max_wait ahead)
--   use:  KEYS[2] log (sorted set: token -> grant + budget, us); ARGV: 'use', limit, token,
--         release token or '', budget_us, horizon_us, then pairs (token, bound_us) that lower the
--         entries of calls already made to the bound their callers measured (never raise them)
--         -> {1, at_us, now_us}: granted at `at` (now, or the instant within the horizon when the
--         log has room), logged as at + budget; {0, retry_us, now_us}: no room within the horizon
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
local horizon = tonumber(ARGV[6] or '0')
if ARGV[4] ~= '' then redis.call('ZREM', KEYS[2], ARGV[4]) end
for i = 7, #ARGV - 1, 2 do
  redis.call('ZADD', KEYS[2], 'XX', 'LT', ARGV[i + 1], ARGV[i])
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', string.format('%d', now - 1000000))
local n = redis.call('ZCARD', KEYS[2])
local at = now
if n >= limit then
  -- The first instant at which fewer than `limit` logged calls may share a second with this one:
  -- a second after the (n - limit + 1)-th smallest entry.
  local entry = redis.call('ZRANGE', KEYS[2], n - limit, n - limit, 'WITHSCORES')
  at = tonumber(entry[2]) + 1000000
  if at - now > horizon then
    return {0, at - now - horizon, now}
  end
end
redis.call('ZADD', KEYS[2], string.format('%d', at + budget), ARGV[3])
redis.call('PEXPIRE', KEYS[2], math.floor((at - now + budget) / 1000) + 2000)
return {1, at, now}
