-- Complete a record, fenced on status, attempt and owner (rules 2 and 4).
-- KEYS[1]: the record, KEYS[2]: the stuck index of its hash slot.
-- ARGV: id, attempt, owner, expires_at_s, response status, headers,
-- body kind, body ('' for none), encoding ('' or 'gzip'), and when the key
-- itself goes (epoch seconds, a grace after expires_at_s).
-- Returns 1 when completed, 2 when it already is by this same lease (our own
-- write coming back), 0 when fenced, 3 when the record is gone (nothing
-- written either way).
local record, index = KEYS[1], KEYS[2]
local f = redis.call('HMGET', record, 'status', 'attempt', 'owner')
if not f[1] then
  return 3
end
if f[2] ~= ARGV[2] or f[3] ~= ARGV[3] then
  return 0
end
if f[1] == 'COMPLETED' then
  return 2
end
if f[1] ~= 'IN_PROGRESS' then
  return 0
end
write_completed(record, index, ARGV[1], nil, 4)
return 1
