-- Resolve a stuck record, fenced on what the listing saw: still in progress
-- under the same attempt and owner, lease ended before the cutoff.
-- KEYS[1]: the record, KEYS[2]: the stuck index of its hash slot.
-- ARGV: id, attempt, owner, cutoff_ms, now_ms, 'release' or 'fail', then for
-- 'fail': expires_at_s, response status, headers, body kind, body ('' for
-- none), encoding ('' or 'gzip'), when the key itself goes, and the owner
-- the failed record gets (rule 5: the replaced attempt is fenced).
-- Returns 'released', 'failed', 'resumable' or 'fenced'.
local record, index = KEYS[1], KEYS[2]
local f = redis.call('HMGET', record, 'status', 'attempt', 'owner', 'lease', 'expires', 'checkpoint')
if not f[1] then
  -- Gone (expired): its index entry goes too.
  redis.call('ZREM', index, ARGV[1])
  return 'fenced'
end
local lease, expires = tonumber(f[4]), tonumber(f[5])
if f[1] ~= 'IN_PROGRESS' or f[2] ~= ARGV[2] or f[3] ~= ARGV[3]
  or lease == nil or expires == nil or lease >= tonumber(ARGV[4]) then
  return 'fenced'
end
local expired = expires < math.floor(tonumber(ARGV[5]) / 1000)
if ARGV[6] == 'release' and f[6] then
  -- Its retry resumes from the recovery point.
  return 'resumable'
end
if ARGV[6] == 'fail' and not expired then
  write_completed(record, index, ARGV[1], ARGV[14], 7)
  return 'failed'
end
-- Released, or failing a record past its expiry: it is absent by
-- definition, never brought back.
redis.call('DEL', record)
redis.call('ZREM', index, ARGV[1])
return 'released'
