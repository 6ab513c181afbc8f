-- Commit a recovery point, fenced on status, attempt and owner (rule 2).
-- KEYS[1]: the record.
-- ARGV: attempt, owner, the recovery point (JSON).
-- Returns 1 when written, 0 when fenced (nothing written).
local record = KEYS[1]
local f = redis.call('HMGET', record, 'status', 'attempt', 'owner')
if f[1] == 'IN_PROGRESS' and f[2] == ARGV[1] and f[3] == ARGV[2] then
  redis.call('HSET', record, 'checkpoint', ARGV[3])
  return 1
end
return 0
