package redis

import goredis "github.com/redis/go-redis/v9"

// The metadata scripts. Each runs atomically on the server and touches the
// keys of one partition, which share a hash tag and so one Cluster slot;
// only in standalone mode ("inline") do they also touch the prefix's index
// counter and partition registry. Lua's unpack and redis.call take at most
// a few thousand arguments, so every bulk command goes in steps of 2000.
//
// Keys of partition P (base = <prefix>:{<prefix>:<P escaped>}):
//
//	base:r      hash    key -> row entry (see row.go), for every prepared row
//	base:n      string  the number of committed rows
//	base:f      set     field names that have a generation hash
//	base:c      string  a random token that every commit and delete of the
//	                    partition replaces: a Commit that finds the token its
//	                    Prepare saw knows that no row changed in between and
//	                    skips comparing entries (commitFastScript)
//	base:g:<f>  hash    key -> next generation to reserve for field f, once
//	                    the row reserved f again after its first Prepare
//
// The scripts do as little per row as they can: Lua costs about as much per
// operation as the server spends on a whole SET (measured), so entries are
// built and merged in Go, and the scripts compare and store them.
//
// Prefix keys (gbase = <prefix>:{<prefix>}):
//
//	gbase:next  string  global index counter: the next index is its value
//	gbase:parts set     partition names that may have rows

// luaPrelude is shared by the scripts. hsetmany sets the fields and values
// t[lo..hi] of a hash. A hash starts in the compact listpack encoding and
// converts to a hash table at 128 fields; one HSET that grows a listpack
// past that runs about eight times slower (measured: 0.9 ms against 0.11 ms
// for 1024 fields on Redis 7.0) than one that starts as a table. Redis
// converts up front when a value is longer than hash-max-listpack-value
// (64 by default), so a large insert into a listpack hash carries one long
// placeholder value, deleted right after (a table never converts back).
// committed tells whether a row entry has a blob.
const luaPrelude = `
local STEP = 2000
local function hsetmany(key, t, lo, hi)
  local n = hi - lo + 1
  if n <= 0 then
    return
  end
  local D = '\255tq:encoding'
  local trick = false
  if n >= 128 then
    local enc = redis.call('OBJECT', 'ENCODING', key)
    if (not enc or enc == 'listpack' or enc == 'ziplist') and redis.call('HEXISTS', key, D) == 0 then
      trick = true
      for i = lo, hi, 2 do
        if t[i] == D then
          trick = false
          break
        end
      end
    end
  end
  for a = lo, hi, 2 * STEP do
    local b = math.min(a + 2 * STEP - 1, hi)
    if trick and a == lo then
      redis.call('HSET', key, D, string.rep('.', 1024), unpack(t, a, b))
    else
      redis.call('HSET', key, unpack(t, a, b))
    end
  end
  if trick then
    redis.call('HDEL', key, D)
  end
end
local function committed(e)
  return #e > 18 + struct.unpack('>H', e, 9)
end
`

// prepareScript reserves indexes and generations. Keys and fields are
// distinct (the caller checks).
//
// KEYS: r, f, c, g:<field>... (nf of them), then, inline only, next,
// parts. ARGV: nk, nf, base, avail, inline ("1"/"0"), partition, tail
// (what follows a new row's index in its entry: see row.go), token (for c
// when the partition has none), keys..., fields...
//
// New keys take indexes in key order: inline, from INCRBY on the counter;
// otherwise from the range [base, base+avail) the caller reserved, and when
// that is too small the script changes nothing and replies {"need", n}.
// A new row reserves generation 0 of every field and records that in its
// entry's signature; an existing row reads the field's generation hash,
// or, with no entry there, its signature.
// Reply: {n, base, token (c's value), then per existing row its position
// (1-based) and entry, then the existing rows' generations, field-major}: new rows take
// base, base+1, ... in key order and generation 0 of every field, so
// nothing per new row goes back (each reply value costs the server too).
var prepareScript = goredis.NewScript(luaPrelude + `
local nk, nf = tonumber(ARGV[1]), tonumber(ARGV[2])
local K0 = 8
local F0 = K0 + nk
local new, old, oldE = {}, {}, {}
-- A partition with no rows yet (the usual first write of a step) has
-- only new keys: no HMGET, whose reply of nk nils costs the server more
-- than the check.
local fresh = redis.call('EXISTS', KEYS[1]) == 0
for lo = 1, fresh and 0 or nk, STEP do
  local hi = math.min(lo + STEP - 1, nk)
  local got = redis.call('HMGET', KEYS[1], unpack(ARGV, K0 + lo, K0 + hi))
  for j = 1, hi - lo + 1 do
    local e = got[j]
    if e then
      old[#old + 1] = lo + j - 1
      oldE[#oldE + 1] = e
    else
      new[#new + 1] = lo + j - 1
    end
  end
end
local n = #new
if fresh then
  n = nk
end
local base = 0
if n > 0 then
  if ARGV[5] == '1' then
    base = redis.call('INCRBY', KEYS[4 + nf], n) - n
    redis.call('SADD', KEYS[5 + nf], ARGV[6])
  else
    if n > tonumber(ARGV[4]) then
      return {'need', n}
    end
    base = tonumber(ARGV[3])
  end
  local tail = ARGV[7]
  local fmt = '>I8c' .. #tail
  local args = {}
  if fresh then
    for j = 1, n do
      args[2 * j - 1] = ARGV[K0 + j]
      args[2 * j] = struct.pack(fmt, base + j - 1, tail)
    end
  else
    for j = 1, n do
      args[2 * j - 1] = ARGV[K0 + new[j]]
      args[2 * j] = struct.pack(fmt, base + j - 1, tail)
    end
  end
  hsetmany(KEYS[1], args, 1, 2 * n)
end
local token = redis.call('GET', KEYS[3])
if not token then
  token = ARGV[8]
  redis.call('SET', KEYS[3], token)
end
local out = {n, base, token}
local no = #old
for j = 1, no do
  out[2 * j + 2] = old[j]
  out[2 * j + 3] = oldE[j]
end
if no > 0 then
  local ks = {}
  for j = 1, no do
    ks[j] = ARGV[K0 + old[j]]
  end
  for fi = 1, nf do
    local pos = 3 + 2 * no + no * (fi - 1)
    local g = KEYS[3 + fi]
    local pat = '\0' .. ARGV[F0 + fi] .. '\0'
    local args = {}
    for lo = 1, no, STEP do
      local hi = math.min(lo + STEP - 1, no)
      local got = redis.call('HMGET', g, unpack(ks, lo, hi))
      for j = 1, hi - lo + 1 do
        local jj = lo + j - 1
        local gen = tonumber(got[j])
        if not gen then
          local e = oldE[jj]
          local p = string.find(e, pat, 11, true)
          if p and p + #pat - 1 <= 10 + struct.unpack('>H', e, 9) then
            gen = 1
          else
            gen = 0
          end
        end
        out[pos + jj] = gen
        args[2 * jj - 1] = ks[jj]
        args[2 * jj] = gen + 1
      end
    end
    hsetmany(g, args, 1, 2 * no)
  end
  if nf > 0 then
    redis.call('SADD', KEYS[2], unpack(ARGV, F0 + 1, F0 + nf))
  end
end
return out
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

// commitScript stores new row entries if every row's entry is still the
// one the caller merged from. It writes nothing unless every check passes.
//
// KEYS: r, n, c. ARGV: rows (n), fresh (how many rows were never
// committed: the caller knows, since it expects their bare prepared
// entries), token (c's next value), keys (n), expected entries (n), new
// entries (n). (Every argument costs the server a Lua string, so none is
// sent twice.)
// Reply: {"ok"}; {"conflict", pos} (1-based row that is gone or has
// another index); {"retry", pos, current entry, ...} for rows that changed.
var commitScript = goredis.NewScript(luaPrelude + `
local n = tonumber(ARGV[1])
local K0, E0, P0 = 3, 3 + n, 3 + 2 * n
local retry = {'retry'}
for lo = 1, n, STEP do
  local hi = math.min(lo + STEP - 1, n)
  local got = redis.call('HMGET', KEYS[1], unpack(ARGV, K0 + lo, K0 + hi))
  for j = 1, hi - lo + 1 do
    local i = lo + j - 1
    local cur, want = got[j], ARGV[E0 + i]
    if cur ~= want then
      if not cur or string.sub(cur, 1, 8) ~= string.sub(want, 1, 8) then
        return {'conflict', i}
      end
      retry[#retry + 1] = i
      retry[#retry + 1] = cur
    end
  end
end
if #retry > 1 then
  return retry
end
local args = {}
for i = 1, n do
  args[2 * i - 1] = ARGV[K0 + i]
  args[2 * i] = ARGV[P0 + i]
end
hsetmany(KEYS[1], args, 1, 2 * n)
if ARGV[2] ~= '0' then
  redis.call('INCRBY', KEYS[2], ARGV[2])
end
redis.call('SET', KEYS[3], ARGV[3])
return {'ok'}
`)

// deleteScript removes rows and replies with the entries of committed rows
// removed. The generation hashes are named from the field set, so they are
// not in KEYS; they share the partition's hash tag, hence its slot.
//
// KEYS: r, f, n, c, and, inline only, parts. ARGV: base, inline,
// partition, token (c's next value), keys... (distinct).
var deleteScript = goredis.NewScript(luaPrelude + `
local out = {}
local fields = redis.call('SMEMBERS', KEYS[2])
for lo = 5, #ARGV, STEP do
  local hi = math.min(lo + STEP - 1, #ARGV)
  local got = redis.call('HMGET', KEYS[1], unpack(ARGV, lo, hi))
  for j = 1, #got do
    if got[j] and committed(got[j]) then
      out[#out + 1] = got[j]
    end
  end
  redis.call('HDEL', KEYS[1], unpack(ARGV, lo, hi))
  for _, f in ipairs(fields) do
    redis.call('HDEL', ARGV[1] .. ':g:' .. f, unpack(ARGV, lo, hi))
  end
end
if #out > 0 then
  redis.call('DECRBY', KEYS[3], #out)
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('DEL', KEYS[4])
  if ARGV[2] == '1' then
    redis.call('DEL', KEYS[2], KEYS[3])
    redis.call('SREM', KEYS[5], ARGV[3])
  end
else
  redis.call('SET', KEYS[4], ARGV[4])
end
return out
`)

// deletePartitionScript removes every row of a partition and replies with
// the entries of its committed rows.
//
// KEYS: r, f, n, c, and, inline only, parts. ARGV: base, inline,
// partition.
var deletePartitionScript = goredis.NewScript(luaPrelude + `
local out = {}
for _, e in ipairs(redis.call('HVALS', KEYS[1])) do
  if committed(e) then
    out[#out + 1] = e
  end
end
for _, f in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  redis.call('DEL', ARGV[1] .. ':g:' .. f)
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
if ARGV[2] == '1' then
  redis.call('SREM', KEYS[5], ARGV[3])
end
return out
`)
