package redis

import goredis "github.com/redis/go-redis/v9"

// The metadata scripts. Each runs atomically on the server and touches the
// keys of one partition, which share a hash tag and so one Cluster slot;
// only on a standalone server ("inline") do they also touch the prefix's
// index counter and partition registry.
//
// A partition's metadata is a log: every Prepare, Commit and Delete
// appends one record (see record.go) holding the whole batch, and clients
// keep the partition's state by replaying the log (see view.go). Per-row
// entries in a hash cost the server about 0.25 us per row and write
// (measured: HSET of 1024 entries, 0.25-0.3 ms, twice per put); a record
// is one string, and the scripts take a handful of arguments, so Lua's
// per-argument cost (about 0.35 us each) no longer counts.
//
// Keys of partition P (base = <prefix>:{<prefix>:<P escaped>}):
//
//	base:l  list    the log: records, oldest first
//	base:e  string  the log's epoch: a random id, set when the log is
//	                created or replaced by a snapshot; a client whose
//	                view has another epoch reads the log from the start
//	base:n  string  the number of committed rows (for Partitions)
//
// Prefix keys (gbase = <prefix>:{<prefix>}):
//
//	gbase:next  string  global index counter: the next index is its value
//	gbase:parts set     partition names that may have rows

// appendScript appends one record if the log is as the caller's view has
// it (same epoch, want records), else replies with what the caller lacks.
//
// KEYS: l, e, n, and inline only: next, parts. ARGV: epoch, want,
// newEpoch (for a log created or replaced), record ("" appends nothing:
// the caller only checks its view), need (indexes a Prepare draws, inline),
// base (of a Prepare's indexes, not inline), delta (committed rows),
// partition, drop ("1": the record empties the partition, so the log, its
// epoch and counter are deleted instead, as by DeletePartition), marked
// ("1": the last key is a marker the MSET of the record's cells set in the
// same transaction; the script deletes it and, if it is missing because
// that MSET failed, appends nothing and replies {"nodata"}).
//
// A Prepare record arrives as "P:..." and is stored as "P<base>:...".
// A snapshot ("S...") replaces the log and its epoch.
// Reply: {"ok", epoch, base}, {"stale", epoch, from, records from on}, or
// {"nodata"}.
var appendScript = goredis.NewScript(`
if ARGV[10] == '1' and redis.call('DEL', KEYS[#KEYS]) == 0 then
  return {'nodata'}
end
local cur = redis.call('GET', KEYS[2]) or ''
local len = redis.call('LLEN', KEYS[1])
local want = tonumber(ARGV[2])
if cur ~= ARGV[1] or len ~= want then
  local from = 0
  if cur == ARGV[1] and len > want then
    from = want
  end
  return {'stale', cur, from, redis.call('LRANGE', KEYS[1], from, -1)}
end
if ARGV[9] == '1' then
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
  if KEYS[5] then
    redis.call('SREM', KEYS[5], ARGV[8])
  end
  return {'ok', '', 0}
end
local rec = ARGV[4]
local base = 0
if rec ~= '' then
  local kind = string.sub(rec, 1, 1)
  if kind == 'S' then
    redis.call('DEL', KEYS[1])
    redis.call('SET', KEYS[2], ARGV[3])
    cur = ARGV[3]
  elseif cur == '' then
    redis.call('SET', KEYS[2], ARGV[3])
    cur = ARGV[3]
    if KEYS[5] then
      redis.call('SADD', KEYS[5], ARGV[8])
    end
  end
  if kind == 'P' then
    local need = tonumber(ARGV[5])
    if KEYS[4] then
      base = redis.call('INCRBY', KEYS[4], need) - need
    else
      base = tonumber(ARGV[6])
    end
    rec = 'P' .. string.format('%d', base) .. string.sub(rec, 2)
  end
  redis.call('RPUSH', KEYS[1], rec)
end
local delta = tonumber(ARGV[7])
if delta ~= 0 and redis.call('INCRBY', KEYS[3], delta) <= 0 then
  redis.call('DEL', KEYS[3])
end
return {'ok', cur, base}
`)

// readScript replies with the records of the log a view at (epoch, from)
// lacks, and with drop set deletes the partition.
//
// KEYS: l, e, n, and inline only: parts. ARGV: epoch, from, drop ("1"),
// partition. Reply: {epoch, from, records from on}; from is 0 when the
// view's epoch is not the log's.
var readScript = goredis.NewScript(`
local cur = redis.call('GET', KEYS[2]) or ''
local from = tonumber(ARGV[2])
if cur ~= ARGV[1] or redis.call('LLEN', KEYS[1]) < from then
  from = 0
end
local recs = redis.call('LRANGE', KEYS[1], from, -1)
if ARGV[3] == '1' then
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
  if KEYS[4] then
    redis.call('SREM', KEYS[4], ARGV[4])
  end
end
return {cur, from, recs}
`)

// allocScript reserves n indexes and registers the partition (the
// cluster-safe path: the counter and registry live in the prefix's slot).
//
// KEYS: next, parts. ARGV: n, partition. Reply: the counter after the
// increment; the range is [reply-n, reply).
var allocScript = goredis.NewScript(`
local v = redis.call('INCRBY', KEYS[1], ARGV[1])
redis.call('SADD', KEYS[2], ARGV[2])
return v
`)
