-- Delete a record so the next retry runs again, fenced on status, attempt and
-- owner (rules 2 and 4).
-- KEYS[1]: the record, KEYS[2]: the stuck index of its hash slot.
-- ARGV: id, attempt, owner.
-- Returns 1 when deleted or already gone, 0 when fenced (nothing written).
local record, index = KEYS[1], KEYS[2]
local f = redis.call('HMGET', record, 'status', 'attempt', 'owner')
if not f[1] then
  -- Gone (our own earlier try, expiry or the sweeper): what a release wants.
  redis.call('ZREM', index, ARGV[1])
  return 1
end
if f[1] == 'IN_PROGRESS' and f[2] == ARGV[2] and f[3] == ARGV[3] then
  redis.call('DEL', record)
  redis.call('ZREM', index, ARGV[1])
  return 1
end
return 0
