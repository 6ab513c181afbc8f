-- Joined before complete.lua and resolve.lua (mod.rs, SOURCES): both write a
-- record's final outcome the same way, a completion by its own lease and the
-- sweeper's `fail`.
--
-- Marks `record` completed with the response in ARGV[first] to
-- ARGV[first + 6] (expires_at_s, response status, headers, body kind, body
-- ('' for none), encoding ('' or 'gzip'), and when the key itself goes), and
-- hands it to `owner` when one is given; its recovery point goes, and its
-- entry `id` leaves the stuck index `index`.
local function write_completed(record, index, id, owner, first)
  local expires, status, headers, kind, body, encoding, key_expires = unpack(ARGV, first, first + 6)
  redis.call('HSET', record, 'status', 'COMPLETED', 'expires', expires,
    'response_status', status, 'response_headers', headers, 'response_body_kind', kind)
  if owner then
    redis.call('HSET', record, 'owner', owner)
  end
  if body == '' then
    redis.call('HDEL', record, 'response_body')
  else
    redis.call('HSET', record, 'response_body', body)
  end
  if encoding == '' then
    redis.call('HDEL', record, 'response_encoding')
  else
    redis.call('HSET', record, 'response_encoding', encoding)
  end
  redis.call('HDEL', record, 'checkpoint')
  redis.call('EXPIREAT', record, key_expires)
  redis.call('ZREM', index, id)
end
