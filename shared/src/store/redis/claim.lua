-- Claim a record in one round trip (docs/DESIGN.md section 4, rules 1 and 3).
-- KEYS[1]: the record (a hash), KEYS[2]: the stuck index of its hash slot.
-- ARGV: id, fingerprint, owner, now_ms, lease_expires_at_ms, expires_at_s,
-- and when the key itself goes (epoch seconds, a grace after expires_at_s).
-- Returns {1, attempt, checkpoint|false} when claimed (new life or takeover),
-- {2, attempt, fingerprint, checkpoint|false} for our own earlier claim,
-- {0, HGETALL} with the record as it is otherwise, {3, why} when the hash is
-- not a record.
local record, index = KEYS[1], KEYS[2]
-- Lua's numbers are doubles, exact up to 2^53: past it a next attempt would
-- be rounded, and a fencing token must never repeat. Only a damaged record,
-- or another tool's, counts that far (rules::ATTEMPT_EXHAUSTED).
local exhausted = {3, 'its attempt count is too large to hand out the next fencing token'}
local exact = 9007199254740992
local id, fingerprint, owner = ARGV[1], ARGV[2], ARGV[3]
local now_ms = tonumber(ARGV[4])
local now_s = math.floor(now_ms / 1000)
local f = redis.call('HMGET', record, 'status', 'fingerprint', 'attempt', 'owner', 'lease', 'expires', 'checkpoint')
local status, old_fingerprint, attempt, old_owner, lease, expires, checkpoint =
  f[1], f[2], f[3], f[4], f[5], f[6], f[7]

if status then
  if tonumber(attempt) == nil or tonumber(expires) == nil
    or (status == 'IN_PROGRESS' and tonumber(lease) == nil) then
    return {3, 'attempt, expires or lease is missing or not a number'}
  end
  local expired = tonumber(expires) < now_s
  local take_over = status == 'IN_PROGRESS' and tonumber(lease) < now_ms
    and old_fingerprint == fingerprint and not expired
  if take_over then
    -- An abandoned attempt of the same request in the same life: the next
    -- attempt inherits its recovery point.
    if tonumber(attempt) >= exact then
      return exhausted
    end
    local next_attempt = tonumber(attempt) + 1
    redis.call('HSET', record, 'attempt', next_attempt, 'owner', owner, 'lease', ARGV[5], 'expires', ARGV[6])
    redis.call('EXPIREAT', record, ARGV[7])
    redis.call('ZADD', index, ARGV[5], id)
    return {1, next_attempt, checkpoint}
  end
  if not expired then
    if status == 'IN_PROGRESS' and old_owner == owner then
      return {2, tonumber(attempt), old_fingerprint, checkpoint}
    end
    return {0, redis.call('HGETALL', record)}
  end
end

-- A new life: nothing of an earlier one (response, recovery point) is kept
-- but its attempt count, so fencing tokens keep growing.
local previous = tonumber(attempt) or 0
if previous >= exact then
  return exhausted
end
local next_attempt = previous + 1
redis.call('DEL', record)
redis.call('HSET', record, 'status', 'IN_PROGRESS', 'fingerprint', fingerprint, 'attempt', next_attempt,
  'owner', owner, 'lease', ARGV[5], 'expires', ARGV[6])
redis.call('EXPIREAT', record, ARGV[7])
redis.call('ZADD', index, ARGV[5], id)
return {1, next_attempt, false}
