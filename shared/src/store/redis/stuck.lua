-- One page of the records of one hash slot in progress whose lease ended
-- before the cutoff, in lease order, from a position (lease, id) exclusive.
-- KEYS[1]: the stuck index (a sorted set: id scored by lease end).
-- ARGV: the key prefix of this slot's records, cutoff_ms, after_lease ('' to
-- start), after_id, limit, budget (index entries to look up at most).
-- Returns {more, {id, attempt, owner, lease, has_checkpoint, ...},
-- resume_lease, resume_id}: where the next call goes on (the last entry
-- passed; '' when none was). Entries whose record is gone (expired) or no
-- longer in progress are removed; an entry scored before its record's lease
-- (the index disagrees with the record) is scored again by the record. A script blocks the server while it
-- runs, so one call looks up at most `budget` entries: an index full of
-- entries to remove or skip is worked through call by call (more = 1).
local index, base = KEYS[1], ARGV[1]
local cutoff = ARGV[2]
local after_lease, after_id = tonumber(ARGV[3]), ARGV[4]
local limit = tonumber(ARGV[5])
local budget = math.max(tonumber(ARGV[6]) or limit, 1)

-- Byte order, as the sorted set orders members of equal score (string
-- comparison in Lua follows the server's locale).
local function at_or_before(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x < y
    end
  end
  return #a <= #b
end

local min = '-inf'
if after_lease then
  min = ARGV[3]
end
local out, found, more, offset, looked = {}, 0, 0, 0, 0
local resume_lease, resume_id = '', ''
local batch = limit + 1
while true do
  local page = redis.call('ZRANGEBYSCORE', index, min, '(' .. cutoff, 'WITHSCORES', 'LIMIT', offset, batch)
  local removed = 0
  for i = 1, #page, 2 do
    local id, lease = page[i], tonumber(page[i + 1])
    if not (after_lease and lease == after_lease and at_or_before(id, after_id)) then
      if looked == budget then
        more = 1
        break
      end
      local r = redis.call('HMGET', base .. id, 'status', 'attempt', 'owner', 'lease', 'checkpoint')
      local record_lease = tonumber(r[4])
      if r[1] == 'IN_PROGRESS' and r[2] and r[3] and record_lease
        and record_lease >= tonumber(cutoff) then
        -- The index disagrees with the record (its entry scored before the
        -- record's lease): the record is the truth. Re-scored, the entry
        -- leaves this range and comes back once that lease is over.
        redis.call('ZADD', index, r[4], id)
        removed = removed + 1
      elseif r[1] == 'IN_PROGRESS' and r[2] and r[3] and r[4] then
        if found == limit then
          more = 1
          break
        end
        found = found + 1
        out[#out + 1] = id
        out[#out + 1] = r[2]
        out[#out + 1] = r[3]
        out[#out + 1] = r[4]
        out[#out + 1] = r[5] and 1 or 0
      elseif r[1] ~= 'IN_PROGRESS' then
        redis.call('ZREM', index, id)
        removed = removed + 1
      end
      looked = looked + 1
      resume_lease, resume_id = page[i + 1], id
    end
  end
  if more == 1 or #page < 2 * batch then
    break
  end
  offset = offset + #page / 2 - removed
end
return {more, out, resume_lease, resume_id}
