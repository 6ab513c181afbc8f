-- Give a record up so the next retry runs, fenced on status, attempt and
-- owner (rules 2 and 4): delete it, or, when it holds a recovery point, keep
-- it with its lease ended, for the next retry to take over and resume.
-- KEYS[1]: the record, KEYS[2]: the stuck index of its hash slot.
-- ARGV: id, attempt, owner, the lease's new end (epoch ms).
-- Returns 1 when deleted or already gone, 2 when the lease was ended, 0 when
-- fenced (nothing written).
local record, index = KEYS[1], KEYS[2]
local f = redis.call('HMGET', record, 'status', 'attempt', 'owner', 'checkpoint')
if not f[1] then
  -- Gone (our own earlier try, expiry or the sweeper): what a release wants.
  redis.call('ZREM', index, ARGV[1])
  return 1
end
if f[1] == 'IN_PROGRESS' and f[2] == ARGV[2] and f[3] == ARGV[3] then
  if f[4] then
    redis.call('HSET', record, 'lease', ARGV[4])
    redis.call('ZADD', index, ARGV[4], ARGV[1])
    return 2
  end
  redis.call('DEL', record)
  redis.call('ZREM', index, ARGV[1])
  return 1
end
return 0
