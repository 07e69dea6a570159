package redis

import goredis "github.com/redis/go-redis/v9"

// The scripts of the log (Log; LAYOUT.md section 9, "Scripts", restates
// them as a specification, sections 2 to 8 the keys they keep). They know nothing of
// tq's rules: they number, stamp and keep opaque records, and answer what
// follows a reader's position. Each touches the keys of one partition
// (one hash tag, one Cluster slot), and on a standalone server ("inline")
// also the prefix's index counter and partition registry. As the other
// scripts of the engine, each reads and checks everything it needs before
// its first write, so that a script that fails has changed nothing.
//
// Keys of partition P (base = <prefix>:{<prefix>:<P escaped>}):
//
//	base:log   stream  the entries: ID "<N>-0", N dense from 1; fields, in
//	                   this order, i (record ID, decimal), t (time, µs,
//	                   decimal), b (first global index, decimal; only
//	                   when the record reserved some), d (the record)
//	base:snap  hash    the snapshot: n (the N it follows, decimal), i
//	                   (the record ID of entry n), d (its bytes); z ("1")
//	                   when the log was emptied at n (the state there is
//	                   empty: a nil snapshot); e ("1") while it is still
//	                   empty: both keys expire an hour after the emptying
//	                   unless an append comes first
//
// and gbase:next, gbase:parts as for the rest of the engine.

// logLastLua sets last to the stream's (KEYS[1]) last entry, as
// XREVRANGE + - COUNT 1 gives it.
const logLastLua = `local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
`

// logTailLua computes the log (stream KEYS[1], snapshot KEYS[2]) after
// the position (fn, fid), fn the decimal N ("0": the start) and fid the
// decimal record ID of the entry there, given last (logLastLua). It sets
// restart (0, or 1 when the log does not hold the position), the
// snapshot's sn, sid and sd (0, "0", false when there is none or no
// restart), and e, the entries that follow: the position's, or, on a
// restart, the snapshot's (every entry when there is no snapshot), as
// XRANGE gives them.
//
// The start is held when the log's first entry is 1 or it has none; any
// other position when its entry is there with the same record ID (an
// entry's first field is i). A position at the last entry (a reader or
// writer that is up to date) costs nothing past the XREVRANGE. It is a
// block, not a function: a script that defines a function pays for the
// closure at every call (measured: 0.4 us each).
const logTailLua = `local restart, sn, sid, sd, e = 1, 0, '0', false, nil
if #last == 0 then
  if fn == '0' then
    restart, e = 0, {}
  end
elseif last[1][1] == fn .. '-0' and last[1][2][2] == fid then
  restart, e = 0, {}
elseif fn == '0' then
  e = redis.call('XRANGE', KEYS[1], '-', '+')
  if e[1][1] == '1-0' then
    restart = 0
  end
else
  e = redis.call('XRANGE', KEYS[1], fn .. '-0', '+')
  if #e > 0 and e[1][1] == fn .. '-0' and e[1][2][2] == fid then
    table.remove(e, 1)
    restart = 0
  else
    e = nil
  end
end
if restart == 1 then
  local s = redis.call('HMGET', KEYS[2], 'n', 'i', 'd', 'z')
  if s[1] then
    sn, sid, sd = tonumber(s[1]), s[2], s[3]
    if s[4] then
      sd = false
    end
    e = redis.call('XRANGE', KEYS[1], string.format('%d', sn + 1) .. '-0', '+')
  elseif e == nil then
    e = redis.call('XRANGE', KEYS[1], '-', '+')
  end
end
`

// logAppendScript appends records to a partition's log and replies with
// the log after the caller's position.
//
// KEYS: log, snap; inline: next, parts; then receipts (data keys that
// must exist, see CellLog.AppendCells; after a resend's check); marked: a marker,
// last.
// ARGV: 1 from N, 2 from record ID, 3 time offset (microseconds, added to
// TIME), 4 partition, 5 inline ("1": the counter and registry are KEYS 3
// and 4), 6 base (not inline: the first of the indexes the caller
// reserved), 7 marked ("1": the last key is a marker that the MSET of the
// same transaction set; it must exist, and is deleted), 8 k (records, at
// least 1), then per record: 9+3j ID, 10+3j indexes, 11+3j data.
//
// The records are a resend of an append that applied when the first
// record's ID is among the entries after the position: nothing is
// appended. Otherwise each record j becomes entry last+1+j, stamped with
// the script's time; inline, the indexes of all records are drawn with
// one INCRBY and the partition is registered when the log is created.
//
// Reply: {restart, snapshot n, snapshot id, snapshot, entries, first N
// appended (0 for a resend), time, base, dup, created}, the first five
// as logTailLua sets them; dup is 0, or, for a resend, the (1-based)
// index in entries of the first record's entry; created is 1 when the
// log did not exist or was emptied (an append to an emptied log makes
// its keys persist and, inline, registers the partition again). A
// missing marker is the error NODATA, a missing receipt NOCELLS.
var logAppendScript = goredis.NewScript(logAppendLua)

const logAppendLua = `
local inline = ARGV[5] == '1'
local marked = ARGV[7] == '1'
if marked and redis.call('EXISTS', KEYS[#KEYS]) == 0 then
  return redis.error_reply('NODATA tq: the cells of this append were not written')
end
local fn, fid = ARGV[1], ARGV[2]
` + logLastLua + `local n = 0
if #last > 0 then
  local ln, seq = string.match(last[1][1], '^(%d+)%-(%d+)$')
  if seq ~= '0' then
    return redis.error_reply('ERR tq: log ' .. KEYS[1] .. ' holds entry ' .. last[1][1] .. ', not of the form N-0')
  end
  n = tonumber(ln)
end
` + logTailLua + `for j = 1, #e do
  if e[j][2][2] == ARGV[9] then
    if marked then
      redis.call('DEL', KEYS[#KEYS])
    end
    return {restart, sn, sid, sd, e, 0, 0, 0, j, 0}
  end
end
local nreq = #KEYS - 2
if inline then
  nreq = nreq - 2
end
if marked then
  nreq = nreq - 1
end
local req0 = #KEYS - nreq
if marked then
  req0 = req0 - 1
end
for j = 1, nreq, 1000 do
  local hi = math.min(j + 999, nreq)
  if redis.call('EXISTS', unpack(KEYS, req0 + j, req0 + hi)) ~= hi - j + 1 then
    return redis.error_reply('NOCELLS tq: cells written before this append are not on the server')
  end
end
local k = tonumber(ARGV[8])
local need = 0
for j = 0, k - 1 do
  need = need + tonumber(ARGV[10 + 3 * j])
end
local base = tonumber(ARGV[6])
if inline then
  if need > 0 then
    local nx = redis.call('GET', KEYS[3])
    if nx and not string.match(nx, '^%d+$') then
      return redis.error_reply('ERR tq: index counter ' .. KEYS[3] .. ' is not an integer')
    end
  end
  if n == 0 then
    local ty = redis.call('TYPE', KEYS[4])['ok']
    if ty ~= 'set' and ty ~= 'none' then
      return redis.error_reply('ERR tq: partition registry ' .. KEYS[4] .. ' is a ' .. ty)
    end
  end
  base = 0
  if need > 0 then
    base = redis.call('INCRBY', KEYS[3], need) - need
  end
  if n == 0 then
    redis.call('SADD', KEYS[4], ARGV[4])
  end
end
if marked then
  redis.call('DEL', KEYS[#KEYS])
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2]) + tonumber(ARGV[3])
local ts = string.format('%d', now)
local b = base
for j = 0, k - 1 do
  local x = string.format('%d', n + 1 + j) .. '-0'
  local ni = tonumber(ARGV[10 + 3 * j])
  if ni > 0 then
    redis.call('XADD', KEYS[1], x, 'i', ARGV[9 + 3 * j], 't', ts, 'b', string.format('%d', b), 'd', ARGV[11 + 3 * j])
    b = b + ni
  else
    redis.call('XADD', KEYS[1], x, 'i', ARGV[9 + 3 * j], 't', ts, 'd', ARGV[11 + 3 * j])
  end
end
local created = 0
if n == 0 then
  created = 1
elseif redis.call('HDEL', KEYS[2], 'e') == 1 then
  redis.call('PERSIST', KEYS[1])
  redis.call('PERSIST', KEYS[2])
  if inline then
    redis.call('SADD', KEYS[4], ARGV[4])
  end
  created = 1
end
return {restart, sn, sid, sd, e, n + 1, now, base, 0, created}
`

// logReadScript replies with the log after a position. It writes nothing.
//
// KEYS: log, snap. ARGV: from N, from record ID. Reply: {restart,
// snapshot n, snapshot id, snapshot, entries}, as logTailLua sets them.
var logReadScript = goredis.NewScript(logReadLua)

const logReadLua = `
local fn, fid = ARGV[1], ARGV[2]
` + logLastLua + logTailLua + `return {restart, sn, sid, sd, e}
`

// logCompactScript stores a snapshot and drops the entries before it, or
// deletes the log.
//
// KEYS: log, snap; inline: parts. ARGV: 1 at N, 2 at record ID, 3 keep
// ("1": a snapshot is given, "0": delete), 4 the snapshot, 5 partition, 6
// inline ("1": KEYS[3] is the registry).
//
// With a snapshot: if the log holds entry at (same record ID) and the
// snapshot stored follows an earlier entry (or there is none), it stores
// the new one and trims the stream to at's entry and those after it
// (XTRIM MINID). Without: if at's entry is the log's last, it deletes
// empties the log: trims the stream to that entry, records an empty
// state there (the snapshot's e), sets both keys to expire in an hour
// (an append first makes them persist again), and, inline, unregisters
// the partition; a partition with no stream is unregistered too.
//
// Reply: 0 nothing done, 1 snapshot stored, 2 log emptied, 3 no log.
var logCompactScript = goredis.NewScript(logCompactLua)

const logCompactLua = `
local at = ARGV[1] .. '-0'
if ARGV[3] == '1' then
  if ARGV[1] == '0' then
    return 0
  end
  local e = redis.call('XRANGE', KEYS[1], at, at)
  if #e == 0 or e[1][2][2] ~= ARGV[2] then
    return 0
  end
  local sn = redis.call('HGET', KEYS[2], 'n')
  if sn and tonumber(sn) >= tonumber(ARGV[1]) then
    return 0
  end
  redis.call('HSET', KEYS[2], 'n', ARGV[1], 'i', ARGV[2], 'd', ARGV[4])
  redis.call('HDEL', KEYS[2], 'e', 'z')
  redis.call('XTRIM', KEYS[1], 'MINID', at)
  return 1
end
local inline = ARGV[6] == '1'
` + logLastLua + `if #last > 0 and (last[1][1] ~= at or last[1][2][2] ~= ARGV[2]) then
  return 0
end
if inline then
  local ty = redis.call('TYPE', KEYS[3])['ok']
  if ty ~= 'set' and ty ~= 'none' then
    return redis.error_reply('ERR tq: partition registry ' .. KEYS[3] .. ' is a ' .. ty)
  end
end
local r = 3
if #last > 0 then
  redis.call('XTRIM', KEYS[1], 'MINID', at)
  redis.call('HSET', KEYS[2], 'n', ARGV[1], 'i', ARGV[2], 'd', '', 'z', '1', 'e', '1')
  redis.call('PEXPIRE', KEYS[1], 3600000)
  redis.call('PEXPIRE', KEYS[2], 3600000)
  r = 2
end
if inline then
  redis.call('SREM', KEYS[3], ARGV[5])
end
return r
`
