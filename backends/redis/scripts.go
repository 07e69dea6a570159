package redis

import goredis "github.com/redis/go-redis/v9"

// The metadata scripts. Each runs atomically on the server and touches the
// keys of one partition, which share a hash tag and so one Cluster slot;
// only on a standalone server ("inline") do they also touch the prefix's
// index counter and partition registry. Every script reads and checks all
// it needs before its first write: a script that fails (a key of the wrong
// type, a counter that is not a number) has changed nothing.
//
// A partition's metadata is a log: every Prepare, Commit and Delete
// appends one record (see record.go) holding the whole batch, and clients
// keep the partition's state by replaying the log (see view.go). Per-row
// entries in a hash cost the server about 0.25 us per row and write
// (measured: HSET of 1024 entries, 0.25-0.3 ms, twice per put); a record
// is one string, and the scripts take a handful of arguments, so Lua's
// per-argument cost (about 0.35 us each) no longer counts.
//
// Keys of partition P (base = <prefix>:{<prefix>:<P escaped>}); LAYOUT.md
// gives the byte formats:
//
//	base:l  list    the log: records, oldest first
//	base:e  string  the log's epoch: a random id, set when the log is
//	                created or replaced by a snapshot
//	base:h  string  the log's head: a hash chain over the ids of its
//	                records (see chainHead), so that a client can tell
//	                the log it replayed from another of the same epoch
//	                and length (a replica promoted before it had every
//	                record, a log truncated or rewritten)
//	base:n  string  the number of committed rows (for Partitions)
//	base:x  string  the id of the write that last deleted the log, kept
//	                a minute, so that a resent delete knows it ran
//	base:q:...      the partition's consumption (backends.Queue): task
//	                registry, per-task states, deadlines and batches,
//	                the change counter and its wake stream (see
//	                queue_scripts.go); the append script removes deleted
//	                rows from it and bumps the counter
//
// Prefix keys (gbase = <prefix>:{<prefix>}):
//
//	gbase:next  string  global index counter: the next index is its value
//	gbase:parts set     partition names that may have rows: every
//	                    Prepare adds its partition (the append script
//	                    inline; on a Cluster, allocScript for a Prepare
//	                    of new keys); on a standalone server a write
//	                    that deletes the log removes it
//
// A client's view of a log is (epoch, length, head). A write names the
// view it was computed against and applies only if the log is still
// exactly that; every record carries the id of the write that made it, so
// a write sent twice (go-redis resends a command whose reply it lost) is
// recognised by its id in the records the second send finds, never
// applied twice.

// appendScript appends one record if the log is as the caller's view has
// it (same epoch, length and head), else replies with what the caller
// lacks.
//
// KEYS: l, e, h, n, x, and inline only: next, parts; with marked, a
// marker last; with cells, that many data keys last. ARGV: epoch, want (length), head, newEpoch (for a log
// created or replaced), record ("" appends nothing: the caller only checks
// its view), id (the record's id), need (indexes a Prepare draws, inline),
// base (of a Prepare's indexes, not inline), delta (committed rows),
// partition, drop ("1": the write empties the partition, so the log and
// its keys are deleted instead, as by DeletePartition), inline ("1": the
// counter and registry keys are given), marked ("1": the last key is a
// marker the MSET of the record's cells set in the same transaction; the
// script deletes it and, if it is missing because that MSET failed,
// appends nothing and replies {"nodata"}), age (an abort's olderThan in
// microseconds; the script writes the cutoff, its time less age), cells
// (not with marked: the last cells KEYS are data keys, a commit's
// receipts, that must all exist, else the script appends nothing and
// replies {"nodata"}; "0" none), unqueue (the consumption the record
// removes, see unqueueLua: a Delete's committed indexes; ignored for
// other records).
//
// A commit, a delete and a delete partition (and a drop) bump the
// partition's change counter and make its wake stream anew (unqueueLua);
// a delete also removes its rows from every task's consumption, and a
// delete partition or a drop every consumption key of the partition but
// the counter and the stream, in
// the same script, so that no Claim can lease a row once it is gone.
//
// A Prepare registers the partition (inline: its log may have been
// created by fenceScript, which cannot reach the registry). A Prepare
// record arrives as "P<id>:..." and is stored as
// "P<id><base>:<time>:...", time the server's (microseconds since the Unix
// epoch); an abort arrives as "A<id>" and is stored as "A<id><cutoff>". A
// snapshot ("S...") replaces the log and its epoch. Reply: {"ok", epoch,
// base, head, stamp} (stamp: the time or cutoff written, else 0),
// {"stale", epoch, from, head, records from on}, {"dropped"} (this id
// deleted the log: a resent drop), or {"nodata"}.
var appendScript = goredis.NewScript(unqueueLua + `
local marked = ARGV[13] == '1'
if marked and redis.call('EXISTS', KEYS[#KEYS]) == 0 then
  return {'nodata'}
end
local cells = tonumber(ARGV[15] or '0')
local cur = redis.call('GET', KEYS[2]) or ''
local len = redis.call('LLEN', KEYS[1])
local head = redis.call('GET', KEYS[3]) or ''
local want = tonumber(ARGV[2])
if cur ~= ARGV[1] or len ~= want or head ~= ARGV[3] then
  if ARGV[6] ~= '' and redis.call('GET', KEYS[5]) == ARGV[6] then
    return {'dropped'}
  end
  local from = 0
  if cur == ARGV[1] and len >= want then
    from = want
  end
  local recs = redis.call('LRANGE', KEYS[1], from, -1)
  if marked then
    redis.call('DEL', KEYS[#KEYS])
  end
  return {'stale', cur, from, head, recs}
end
if cells > 0 and redis.call('EXISTS', unpack(KEYS, #KEYS - cells + 1, #KEYS)) < cells then
  return {'nodata'}
end
local count = redis.call('GET', KEYS[4])
if count and not string.match(count, '^-?%d+$') then
  return redis.error_reply('ERR tq: committed-row counter ' .. KEYS[4] .. ' is not an integer')
end
local inline = ARGV[12] == '1'
if inline then
  local nx = redis.call('GET', KEYS[6])
  if nx and not string.match(nx, '^%d+$') then
    return redis.error_reply('ERR tq: index counter ' .. KEYS[6] .. ' is not an integer')
  end
  local t = redis.call('TYPE', KEYS[7])['ok']
  if t ~= 'set' and t ~= 'none' then
    return redis.error_reply('ERR tq: partition registry ' .. KEYS[7] .. ' is a ' .. t)
  end
end
if marked then
  redis.call('DEL', KEYS[#KEYS])
end
if ARGV[11] == '1' then
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
  redis.call('SET', KEYS[5], ARGV[6], 'PX', 60000)
  if inline then
    redis.call('SREM', KEYS[7], ARGV[10])
  end
  qchange('*', true)
  return {'ok', '', 0, '', 0}
end
local rec = ARGV[5]
local base = 0
local stamp = 0
if rec ~= '' then
  local kind = string.sub(rec, 1, 1)
  if kind == 'S' then
    redis.call('DEL', KEYS[1])
    redis.call('SET', KEYS[2], ARGV[4])
    cur = ARGV[4]
    head = ''
  elseif cur == '' then
    redis.call('SET', KEYS[2], ARGV[4])
    cur = ARGV[4]
  end
  if kind == 'P' then
    local need = tonumber(ARGV[7])
    if inline then
      redis.call('SADD', KEYS[7], ARGV[10])
      base = redis.call('INCRBY', KEYS[6], need) - need
    else
      base = tonumber(ARGV[8])
    end
    local t = redis.call('TIME')
    stamp = tonumber(t[1]) * 1000000 + tonumber(t[2])
    rec = string.sub(rec, 1, 17) .. string.format('%d', base) .. ':' .. string.format('%d', stamp) .. string.sub(rec, 18)
  elseif kind == 'A' then
    local t = redis.call('TIME')
    stamp = tonumber(t[1]) * 1000000 + tonumber(t[2]) - tonumber(ARGV[14])
    rec = rec .. string.format('%d', stamp)
  end
  redis.call('RPUSH', KEYS[1], rec)
  head = redis.sha1hex(head .. ARGV[6])
  redis.call('SET', KEYS[3], head)
  if kind == 'C' then
    qchange('', false)
  elseif kind == 'D' then
    qchange(ARGV[16] or '', false)
  elseif kind == 'X' then
    qchange('*', false)
  end
end
local delta = tonumber(ARGV[9])
if delta ~= 0 and redis.call('INCRBY', KEYS[4], delta) <= 0 then
  redis.call('DEL', KEYS[4])
end
return {'ok', cur, base, head, stamp}
`)

// readScript replies with the records of the log a view at (epoch, from)
// lacks. It writes nothing.
//
// KEYS: l, e, h. ARGV: epoch, from. Reply: {epoch, from, head, records
// from on}; from is 0 when the view's epoch is not the log's or the log
// is shorter than from. The caller checks the head: records that do not
// chain from its view's head to the log's mean the log is not the one it
// replayed, and it reads the whole log again.
var readScript = goredis.NewScript(`
local cur = redis.call('GET', KEYS[2]) or ''
local from = tonumber(ARGV[2])
if cur ~= ARGV[1] or redis.call('LLEN', KEYS[1]) < from then
  from = 0
end
return {cur, from, redis.call('GET', KEYS[3]) or '', redis.call('LRANGE', KEYS[1], from, -1)}
`)

// fenceScript settles a write whose reply was lost. If the log is still
// where the write was computed (epoch, length, head), the write did not
// apply, and the script appends a fence record (kind F, no body) so that
// a copy of the write still on its way can never apply either. Otherwise
// it replies with the records from the write's position on, where the
// write's own record stands if it applied.
//
// A write computed against no log (epoch "") is fenced by creating the
// log, with a new epoch, holding the fence.
//
// KEYS: l, e, h, x. ARGV: epoch, want, head, the write's id, the fence's
// id, a new epoch. Reply: {"fenced"}, {"dropped"} (the write deleted the
// log), or {"moved", epoch, from, head, records from on}.
var fenceScript = goredis.NewScript(`
if redis.call('GET', KEYS[4]) == ARGV[4] then
  return {'dropped'}
end
local cur = redis.call('GET', KEYS[2]) or ''
local len = redis.call('LLEN', KEYS[1])
local head = redis.call('GET', KEYS[3]) or ''
local want = tonumber(ARGV[2])
if cur == ARGV[1] and len == want and head == ARGV[3] then
  if cur == '' then
    redis.call('SET', KEYS[2], ARGV[6])
  end
  redis.call('RPUSH', KEYS[1], 'F' .. ARGV[5])
  redis.call('SET', KEYS[3], redis.sha1hex(head .. ARGV[5]))
  return {'fenced'}
end
local from = 0
if cur == ARGV[1] and len >= want then
  from = want
end
return {'moved', cur, from, head, redis.call('LRANGE', KEYS[1], from, -1)}
`)

// allocScript reserves n indexes and registers the partition (the
// cluster-safe path: the counter and registry live in the prefix's slot).
//
// KEYS: next, parts. ARGV: n, partition. Reply: the counter after the
// increment; the range is [reply-n, reply). A resent allocScript reserves
// another range; the first is skipped, never reused.
var allocScript = goredis.NewScript(`
local nx = redis.call('GET', KEYS[1])
if nx and not string.match(nx, '^%d+$') then
  return redis.error_reply('ERR tq: index counter ' .. KEYS[1] .. ' is not an integer')
end
local t = redis.call('TYPE', KEYS[2])['ok']
if t ~= 'set' and t ~= 'none' then
  return redis.error_reply('ERR tq: partition registry ' .. KEYS[2] .. ' is a ' .. t)
end
local v = redis.call('INCRBY', KEYS[1], ARGV[1])
redis.call('SADD', KEYS[2], ARGV[2])
return v
`)
