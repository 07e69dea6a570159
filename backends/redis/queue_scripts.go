package redis

import goredis "github.com/redis/go-redis/v9"

// The consumption scripts (see queue.go). Each runs atomically on the
// server, touches the keys of one partition (one hash slot) and judges
// time by the server's clock (TIME, in milliseconds). Keys of partition P,
// base as in scripts.go (LAYOUT.md section 7 gives the formats):
//
//	base:q:t        hash    task -> release mark: the task's registry;
//	                        the mark is the value of base:q:seq when a
//	                        row of the task last became ready again by a
//	                        Nack, Retry or Reset (a client's cache of
//	                        the task's states is current while it is)
//	base:q:s:<task> hash    global index (decimal) -> the row's state
//	                        entry (see qEntryLua); a row without one is
//	                        ready and was never delivered
//	base:q:z:<task> zset    index -> deadline (server ms) of every
//	                        leased row and every Nack-delayed ready row
//	base:q:b:<task> list    the task's open batches (Batch), oldest first
//	base:q:r:<tok>  string  the receipt of a claim (its token) that took
//	                        a share of an open batch: the batch's token
//	                        and units; expires after a minute
//	base:q:seq      string  the partition's change counter: bumped by
//	                        every commit, delete, Nack, Retry and Reset;
//	                        it outlives the other keys: a write that
//	                        deletes the log leaves it a minute (PEXPIRE),
//	                        and the next commit makes it persistent again
//	base:q:w        stream  the wake stream: one entry, whose ID is
//	                        0-<counter>, made anew at each bump and kept
//	                        or expired with the counter; Wait blocks on
//	                        it with XREAD (queue_wait.go)
//
// The task name follows base:q:s: as it is: the hash tag is already
// closed, so no name can move the key to another slot.

// qLuaLib is Lua shared by the consumption scripts.
//
// An entry is "S:d:u:m:tok": S the state (R ready after a delivery, L
// leased, A acked, D dead, X dropped), d the deliveries, u a deadline in
// server ms (L: the lease's end; R: the end of a Nack's delay; 0 none), m
// the MaxDeliveries of the claim that last leased the row (0 no limit),
// tok the lease token (L; A and R keep the token that acked or nacked
// the row, so that a resent Ack or Nack knows it applied).
const qLuaLib = qSentinelLua + qCounterLua + `
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function parse(v)
  if not v then return nil end
  local s, d, u, m, tok = string.match(v, '^(%u):(%d+):(%d+):(%d+):(%w*)$')
  if not s then
    return error('tq: consumption entry ' .. v .. ' does not parse')
  end
  return {s = s, d = tonumber(d), u = tonumber(u), m = tonumber(m), tok = tok}
end
local function fmt(e)
  return e.s .. ':' .. string.format('%d', e.d) .. ':' .. string.format('%d', e.u) .. ':' .. string.format('%d', e.m) .. ':' .. e.tok
end
-- expired returns the entry an ended lease leaves: ready, or dead once it
-- has had its max deliveries.
local function expired(e)
  if e.m > 0 and e.d >= e.m then
    return {s = 'D', d = e.d, u = 0, m = e.m, tok = ''}
  end
  return {s = 'R', d = e.d, u = 0, m = e.m, tok = ''}
end
-- fetch reads the entries of indexes idx (one HMGET per 1000) into a
-- table index -> entry (absent: no state).
local function fetch(s, idx)
  local out = {}
  for j = 1, #idx, 1000 do
    local part = {unpack(idx, j, math.min(j + 999, #idx))}
    local vals = redis.call('HMGET', s, unpack(part))
    for k, i in ipairs(part) do
      out[i] = parse(vals[k])
    end
  end
  return out
end
-- observe returns entry e as a claim at now finds it (nil: no state): an
-- ended lease is ready, or dead (lazy expiry: the stored entry keeps
-- naming its token, so that its holder may still settle it, until the row
-- is delivered again, retried, dropped or reset).
local function observe(e, now)
  if e and e.s == 'L' and e.u <= now then
    return expired(e)
  end
  return e
end
-- A script's writes of entries and deadlines, gathered so that each key
-- takes one command (per 1000 elements) at the end: put records index i's
-- new entry e (nil: none), flush writes them all.
local W = {h = {}, z = {}}
local function put(i, e, now)
  W.h[i] = e and fmt(e) or false
  if e and (e.s == 'L' or (e.s == 'R' and e.u > now)) then
    W.z[i] = e.u
  else
    W.z[i] = false
  end
end
local function flush(s, z)
  local hs, hd, za, zr = {}, {}, {}, {}
  for i, v in pairs(W.h) do
    if v then
      hs[#hs + 1] = i
      hs[#hs + 1] = v
    else
      hd[#hd + 1] = i
    end
  end
  for i, v in pairs(W.z) do
    if v then
      za[#za + 1] = v
      za[#za + 1] = i
    else
      zr[#zr + 1] = i
    end
  end
  if #hs > 0 then redis.call('HSETNX', s, QBIG, '1') end
  if #za > 0 then redis.call('ZADD', z, 'NX', '-inf', QBIG) end
  for j = 1, #hs, 1000 do redis.call('HSET', s, unpack(hs, j, math.min(j + 999, #hs))) end
  for j = 1, #hd, 1000 do redis.call('HDEL', s, unpack(hd, j, math.min(j + 999, #hd))) end
  for j = 1, #za, 1000 do redis.call('ZADD', z, unpack(za, j, math.min(j + 999, #za))) end
  for j = 1, #zr, 1000 do redis.call('ZREM', z, unpack(zr, j, math.min(j + 999, #zr))) end
  if #hd > 0 then qprune(s, z) elseif #zr > 0 then qprune(nil, z) end
  W = {h = {}, z = {}}
end
local function ready(e, now)
  return e == nil or (e.s == 'R' and e.u <= now)
end
-- seen is entry v as a claim at now finds it, for a report.
local function seen(v, now)
  local e = parse(v)
  if e.s == 'L' and e.u <= now then
    return fmt(expired(e))
  end
  if e.s == 'R' and e.u > 0 and e.u <= now then
    e.u = 0
    return fmt(e)
  end
  return v
end
-- sweep looks at the task's deadlines that passed, up to 1024 of them:
-- it appends ended leases to out (index, entry) and forgets the
-- deadlines that no longer matter (delays over, leases that end dead).
-- Ended leases of rows that are ready again keep theirs, so that the
-- next Claim's wake says rows are ready.
local function sweep(s, z, now, out)
  local due = redis.call('ZRANGEBYSCORE', z, '(-inf', now, 'LIMIT', 0, 1024)
  local gone = {}
  local ents = fetch(s, due)
  for _, i in ipairs(due) do
    local e = ents[i]
    if e and e.s == 'L' and e.u <= now then
      out[#out + 1] = i
      out[#out + 1] = fmt(e)
      if expired(e).s == 'D' then
        gone[#gone + 1] = i
      end
    else
      gone[#gone + 1] = i
    end
  end
  if #gone > 0 then
    redis.call('ZREM', z, unpack(gone))
    qprune(nil, z)
  end
end
-- chunks calls f with the elements of list in runs of at most 1000 (Lua's
-- unpack has a limit).
local function chunks(list, f)
  for i = 1, #list, 1000 do
    f(unpack(list, i, math.min(i + 999, #list)))
  end
end
-- logcheck compares a view (epoch, from, head) with the log: it returns
-- the log's epoch, the position the records start at, its head, the
-- records the view lacks, and whether they are only records that neither
-- remove rows nor replace the log (P, C, A, W, B) and chain from the
-- view's head. A view of another epoch, or of more records than the log
-- has, or whose records do not chain, gets the whole log.
local function logcheck(kl, ke, kh, epoch, from, vhead)
  local cur = redis.call('GET', ke) or ''
  local head = redis.call('GET', kh) or ''
  local len = redis.call('LLEN', kl)
  if cur ~= epoch or len < from then
    return cur, 0, head, redis.call('LRANGE', kl, 0, -1), false
  end
  if len == from then
    if head ~= vhead then
      return cur, 0, head, redis.call('LRANGE', kl, 0, -1), false
    end
    return cur, from, head, {}, true
  end
  local recs = redis.call('LRANGE', kl, from, -1)
  local h = vhead
  local plain = true
  for _, r in ipairs(recs) do
    local k = string.sub(r, 1, 1)
    if k == 'D' or k == 'X' or k == 'S' or k == 'F' then
      plain = false
    end
    h = redis.sha1hex(h .. string.sub(r, 2, 17))
  end
  if h ~= head then
    return cur, 0, head, redis.call('LRANGE', kl, 0, -1), false
  end
  return cur, from, head, recs, plain
end
-- dump returns the task's entries, index, entry, ..., as a claim at now
-- finds them.
local function dump(s, now)
  local all = redis.call('HGETALL', s)
  local d = {}
  for j = 1, #all, 2 do
    if all[j] ~= QBIG then
      d[#d + 1] = all[j]
      d[#d + 1] = seen(all[j + 1], now)
    end
  end
  return d
end
`

// claimScript leases rows to a token (see Meta.Claim).
//
// KEYS: l, e, h, q:t, q:s:task, q:z:task, q:seq, q:b:task, q:r:token
// (a batch take's receipt: the batch's token and units, kept a minute,
// so that a resent take replies the same batch). ARGV: epoch,
// from, head (the caller's view), task, rel (the release mark of the
// caller's cache of the task's states; "" for no cache), lease ms, rows,
// min, max deliveries, token, ranks (0: no batch), rank, then the drops
// (a count, then indexes), then the units (each a count, then indexes).
//
// Replies:
//
//	{"stale", epoch, from, head, records}   the view lacks records that
//	    remove rows or replace the log: nothing changed but lazy expiry
//	{"state", epoch, from, head, records, rel, now, entries}   the
//	    caller's cache is not current: the task's entries as of now
//	{"ok", epoch, from, head, records, rel, now, token, leased, sizes,
//	 unavailable, dropped, wake, seq, expired}
//
// leased is index, deliveries, ... of the rows leased (to token, "" when
// none), in unit order, sizes the sizes of their units; unavailable is
// index, entry, ... of candidates found not ready ("" entry: no state),
// expired index, entry, ... of leases the claim saw end; wake is the ms
// until the task's earliest lease or delay still to end (-1: none), seq
// the change counter. With ranks, a claim that takes a share of an open
// batch replies the batch's token, its rows as selected (leased: index,
// deliveries) and units, wake -1, and one more element: each row's entry
// as seen now ("" none), the leases its token still holds renewed. A resent
// claim (its token already holds candidates) replies with the rows its
// token holds and rel "?" (the caller's cache is then to be filled
// again), changing nothing.
var claimScript = goredis.NewScript(qLuaLib + `
local now = now_ms()
local cur, from, head, recs, plain = logcheck(KEYS[1], KEYS[2], KEYS[3], ARGV[1], tonumber(ARGV[2]), ARGV[3])
local s, z, task = KEYS[5], KEYS[6], ARGV[4]
local exp = {}
sweep(s, z, now, exp)
local lease, rows, min, max = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local ranks, rank = tonumber(ARGV[11]), tonumber(ARGV[12])
local until_ = now + lease
-- wake is the ms until the task's earliest lease or delay still to end
-- (-1: none): one that ended already wakes nobody, the claim saw it.
local function wake()
  local w = redis.call('ZRANGEBYSCORE', z, '(' .. string.format('%d', now), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if #w == 0 then return -1 end
  return tonumber(w[2]) - now
end
local function seq()
  return tonumber(redis.call('GET', KEYS[7]) or '0')
end
-- A resent claim (go-redis sends a command again whose reply it lost)
-- finds its rows leased to its own token: it replies with them.
local units = {}
local argi = 14 + tonumber(ARGV[13])
while argi <= #ARGV do
  local n = tonumber(ARGV[argi])
  units[#units + 1] = {unpack(ARGV, argi + 1, argi + n)}
  argi = argi + n + 1
end
local token = ARGV[10]
local ndrop = tonumber(ARGV[13])
local cand = {unpack(ARGV, 14, 13 + ndrop)}
for _, u in ipairs(units) do
  for _, i in ipairs(u) do cand[#cand + 1] = i end
end
local cur_ = fetch(s, cand)
-- share returns a batch's rows as selected (index, deliveries, ...), its
-- unit sizes, each row's entry as seen now ("" none), renewing the leases
-- its token still holds (when renew), and whether any of them is still
-- running. Rows deleted since (no entry, not in the caller's view) are
-- the caller's to leave out.
local function share(btok, body, renew)
  local all = {}
  for i in string.gmatch(body, '%d+') do all[#all + 1] = i end
  local ents = fetch(s, all)
  local rows, sizes, seen_, running = {}, {}, {}, false
  for unit in string.gmatch(body, '[^;]+') do
    local n = 0
    for i in string.gmatch(unit, '%d+') do
      local e = ents[i]
      if e and e.s == 'L' and e.tok == btok then
        if e.u > now then running = true end
        if renew then
          e = {s = 'L', d = e.d, u = until_, m = e.m, tok = btok}
          put(i, e, now)
        end
      else
        e = observe(e, now)
      end
      rows[#rows + 1] = i
      rows[#rows + 1] = e and e.d or 0
      seen_[#seen_ + 1] = e and fmt(e) or ''
      n = n + 1
    end
    sizes[#sizes + 1] = n
  end
  return rows, sizes, seen_, running
end
-- A resent claim that took a share of a batch finds its receipt.
if ranks > 0 then
  local r = redis.call('GET', KEYS[9])
  if r then
    local btok, body = string.match(r, '^(%w+)|(.*)$')
    local rows_, sizes, seen_ = share(btok, body, false)
    return {'ok', cur, from, head, recs, '?', now, btok, rows_, sizes, {}, 0, -1, seq(), exp, seen_}
  end
end
local resent = false
for _, u in ipairs(units) do
  for _, i in ipairs(u) do
    local e = cur_[i]
    if e and e.s == 'L' and e.tok == token then
      resent = true
    end
  end
end
if resent then
  local leased, lsizes = {}, {}
  for _, u in ipairs(units) do
    local n = 0
    for _, i in ipairs(u) do
      local e = cur_[i]
      if e and e.s == 'L' and e.tok == token then
        leased[#leased + 1] = i
        leased[#leased + 1] = e.d
        n = n + 1
      end
    end
    if n > 0 then lsizes[#lsizes + 1] = n end
  end
  return {'ok', cur, from, head, recs, '?', now, token, leased, lsizes, {}, 0, wake(), seq(), exp}
end
if not plain then
  return {'stale', cur, from, head, recs}
end
local rel = redis.call('HGET', KEYS[4], task)
if not (ARGV[5] == (rel or '0') or (ARGV[5] == '' and redis.call('EXISTS', s) == 0)) then
  return {'state', cur, from, head, recs, rel or '0', now, dump(s, now)}
end
rel = rel or '0'
-- A batch rank takes its share of the oldest open batch it has not taken.
if ranks > 0 then
  local bs = redis.call('LRANGE', KEYS[8], 0, -1)
  local removed = 0
  for pos, b in ipairs(bs) do
    local btok, mask, body = string.match(b, '^(%w+)|([01]+)|(.*)$')
    local _, _, _, running = share(btok, body, false)
    if not running then
      -- None of its leases is running: the batch is closed.
      redis.call('LREM', KEYS[8], 1, b)
      removed = removed + 1
    elseif string.sub(mask, rank + 1, rank + 1) == '0' then
      local rows_, sizes, seen_ = share(btok, body, true)
      flush(s, z)
      mask = string.sub(mask, 1, rank) .. '1' .. string.sub(mask, rank + 2)
      redis.call('SET', KEYS[9], btok .. '|' .. body, 'PX', 60000)
      if string.find(mask, '0') then
        redis.call('LSET', KEYS[8], pos - 1 - removed, btok .. '|' .. mask .. '|' .. body)
      else
        redis.call('LREM', KEYS[8], 1, b)
      end
      return {'ok', cur, from, head, recs, rel, now, btok, rows_, sizes, {}, 0, -1, seq(), exp, seen_}
    end
  end
end
local dropped = 0
local unavail = {}
for j = 14, 13 + ndrop do
  local i = ARGV[j]
  local e = observe(cur_[i], now)
  if ready(e, now) then
    local d = e and e.d or 0
    local m = e and e.m or 0
    put(i, {s = 'X', d = d, u = 0, m = m, tok = ''}, now)
    dropped = dropped + 1
  else
    unavail[#unavail + 1] = i
    unavail[#unavail + 1] = e and fmt(e) or ''
  end
end
local taken, sizes, count = {}, {}, 0
for _, u in ipairs(units) do
  local ents = {}
  local ok = count + #u <= rows
  for k, i in ipairs(u) do
    local e = observe(cur_[i], now)
    ents[k] = e
    if not ready(e, now) then
      ok = false
      unavail[#unavail + 1] = i
      unavail[#unavail + 1] = e and fmt(e) or ''
    end
  end
  if ok then
    taken[#taken + 1] = {u, ents}
    count = count + #u
  end
end
local leased, lsizes = {}, {}
if count >= min and count > 0 then
  for _, t in ipairs(taken) do
    local u, ents = t[1], t[2]
    for k, i in ipairs(u) do
      local d = ents[k] and ents[k].d or 0
      local e = {s = 'L', d = d + 1, u = until_, m = max, tok = token}
      put(i, e, now)
      leased[#leased + 1] = i
      leased[#leased + 1] = e.d
    end
    lsizes[#lsizes + 1] = #u
  end
  if ranks > 1 then
    local parts = {}
    local j = 1
    for _, n in ipairs(lsizes) do
      local unit = {}
      for k = 1, n do
        unit[k] = leased[j]
        j = j + 2
      end
      parts[#parts + 1] = table.concat(unit, ',')
    end
    local mask = string.rep('0', rank) .. '1' .. string.rep('0', ranks - rank - 1)
    redis.call('RPUSH', KEYS[8], token .. '|' .. mask .. '|' .. table.concat(parts, ';'))
  end
else
  token = ''
end
flush(s, z)
if (dropped > 0 or #leased > 0) and not redis.call('HGET', KEYS[4], task) then
  redis.call('HSET', KEYS[4], task, '0')
end
return {'ok', cur, from, head, recs, rel, now, token, leased, lsizes, unavail, dropped, wake(), seq(), exp}
`)

// settleScript applies one op to rows of a task (see Meta.Settle).
//
// KEYS: q:t, q:s:task, q:z:task, q:seq, q:w, and for a Drop: l, e, h.
// ARGV: task, op (1 Ack, 2 Nack, 3 Extend, 4 Retry, 5 Drop), token, ms
// (Nack's delay, Extend's lease), then for a Drop the caller's view
// (epoch, from, head), then the indexes, each followed, for a Drop, by
// "1" if the caller's view has the index as a committed row, else "0".
//
// Reply: {"ok", now, lost, rel before, rel after, changed} (changed:
// index, entry, ... of the rows changed, "" for an entry removed), or,
// for a Drop whose view lacks records that remove rows, {"stale",
// epoch, from, head, records} having changed nothing.
var settleScript = goredis.NewScript(qLuaLib + `
local now = now_ms()
local task, op, token, ms = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local s, z = KEYS[2], KEYS[3]
local argi = 5
local step = 1
if op == 5 then
  local cur, from, head, recs, plain = logcheck(KEYS[6], KEYS[7], KEYS[8], ARGV[5], tonumber(ARGV[6]), ARGV[7])
  if not plain or #recs > 0 then
    return {'stale', cur, from, head, recs}
  end
  argi = 8
  step = 2
end
local before = redis.call('HGET', KEYS[1], task) or '0'
local lost, changed = {}, {}
local released = false
local idx = {}
for j = argi, #ARGV, step do idx[#idx + 1] = ARGV[j] end
local cur = fetch(s, idx)
local function set(i, e)
  put(i, e, now)
  cur[i] = e
  changed[#changed + 1] = i
  changed[#changed + 1] = e and fmt(e) or ''
end
for j = argi, #ARGV, step do
  local i = ARGV[j]
  local e = cur[i]
  local held = e and e.s == 'L' and e.tok == token
  local ok = false
  if op == 1 then
    if held then
      set(i, {s = 'A', d = e.d, u = 0, m = e.m, tok = e.tok})
      ok = true
    else
      ok = e and e.s == 'A' and e.tok == token
    end
  elseif op == 2 then
    if held then
      if e.m > 0 and e.d >= e.m then
        set(i, {s = 'D', d = e.d, u = 0, m = e.m, tok = token})
      else
        local u = 0
        if ms > 0 then u = now + ms end
        set(i, {s = 'R', d = e.d, u = u, m = e.m, tok = token})
      end
      released = true
      ok = true
    else
      ok = e and (e.s == 'R' or e.s == 'D') and e.tok == token
    end
  elseif op == 3 then
    if held then
      set(i, {s = 'L', d = e.d, u = now + ms, m = e.m, tok = e.tok})
      ok = true
    end
  elseif op == 4 then
    e = observe(e, now)
    if e and e.s == 'D' then
      set(i, nil)
      released = true
      ok = true
    end
  else
    e = observe(e, now)
    if (e == nil and ARGV[j + 1] == '1') or (e and (e.s == 'R' or e.s == 'D')) then
      set(i, {s = 'X', d = e and e.d or 0, u = 0, m = e and e.m or 0, tok = ''})
      ok = true
    end
  end
  if not ok then
    lost[#lost + 1] = i
  end
end
flush(s, z)
local after = before
if released then
  after = tostring(qcount(KEYS[4], KEYS[5]))
  redis.call('HSET', KEYS[1], task, after)
elseif #changed > 0 and not redis.call('HGET', KEYS[1], task) then
  redis.call('HSET', KEYS[1], task, '0')
end
return {'ok', now, lost, before, after, changed}
`)

// consumptionScript returns tasks' entries, observing leases that ended.
//
// KEYS: q:t, then q:s:task, q:z:task of each task named. ARGV: the task
// names (none: every task of q:t, whose keys the script derives from
// KEYS[1]: they share its slot). Reply: {now, task, entries, task,
// entries, ...}; a task named with no state has empty entries, a task not
// named with none is left out.
var consumptionScript = goredis.NewScript(qLuaLib + `
local now = now_ms()
local out = {now}
local function one(task, s, z, named)
  local exp = {}
  sweep(s, z, now, exp)
  local d = dump(s, now)
  if named or #d > 0 then
    out[#out + 1] = task
    out[#out + 1] = d
  end
end
if #ARGV == 0 then
  local qb = string.sub(KEYS[1], 1, -2)
  for _, task in ipairs(redis.call('HKEYS', KEYS[1])) do
    one(task, qb .. 's:' .. task, qb .. 'z:' .. task, false)
  end
else
  for j, task in ipairs(ARGV) do
    one(task, KEYS[2 * j], KEYS[2 * j + 1], true)
  end
end
return out
`)

// resetScript forgets a task's consumption of rows (see Meta.Reset).
//
// KEYS: q:t, q:s:task, q:z:task, q:b:task, q:seq, q:w. ARGV: task, "*"
// for every row or "" for the indexes that follow. Reply: {rel before,
// rel after}.
var resetScript = goredis.NewScript(qLuaLib + `
local before = redis.call('HGET', KEYS[1], ARGV[1]) or '0'
if ARGV[2] == '*' then
  redis.call('DEL', KEYS[2], KEYS[3])
else
  local idx = {unpack(ARGV, 3)}
  chunks(idx, function(...) redis.call('HDEL', KEYS[2], ...) end)
  chunks(idx, function(...) redis.call('ZREM', KEYS[3], ...) end)
  qprune(KEYS[2], KEYS[3])
end
redis.call('DEL', KEYS[4])
local after = tostring(qcount(KEYS[5], KEYS[6]))
redis.call('HSET', KEYS[1], ARGV[1], after)
return {before, after}
`)

// unqueueLua is the append script's removal of deleted rows from every
// task's consumption (ARGV[16]: "" nothing, "*" every row, else the
// indexes, space-separated), and its bump of the change counter (gone:
// the write deleted the log; the counter then expires after a minute,
// long enough for every waiter to have seen its last value, and a new
// log's first commit keeps it again). Its keys derive from the log's
// (KEYS[1], base:l): they share its slot.
const unqueueLua = qSentinelLua + qCounterLua + `
local function qchange(spec, gone)
  local qb = string.sub(KEYS[1], 1, -2) .. 'q:'
  if spec == '*' then
    for _, t in ipairs(redis.call('HKEYS', qb .. 't')) do
      redis.call('DEL', qb .. 's:' .. t, qb .. 'z:' .. t, qb .. 'b:' .. t)
    end
    redis.call('DEL', qb .. 't')
  elseif spec ~= '' then
    local idx = {}
    for i in string.gmatch(spec, '%d+') do idx[#idx + 1] = i end
    for _, t in ipairs(redis.call('HKEYS', qb .. 't')) do
      for j = 1, #idx, 1000 do
        local part = {unpack(idx, j, math.min(j + 999, #idx))}
        redis.call('HDEL', qb .. 's:' .. t, unpack(part))
        redis.call('ZREM', qb .. 'z:' .. t, unpack(part))
      end
      qprune(qb .. 's:' .. t, qb .. 'z:' .. t)
    end
  end
  qcount(qb .. 'seq', qb .. 'w', not gone)
end
`

// qCounterLua is the bump of a partition's change counter, shared by the
// append script and the consumption scripts.
//
// qcount increments the counter (seq) and replaces the wake stream (w) by
// one holding a single entry whose ID is the new value n, 0-n: a Wait
// blocked in XREAD on the stream from a lower value wakes (a client
// blocked on a key stays blocked through its deletion and is served when
// the script ends). Replacing costs a quarter of what an XADD that trims
// to one entry does, and cannot fail on a stream left ahead of its
// counter. keep: true makes the counter persistent (the stream is, being
// new), false lets both expire in a minute, nil gives the stream the
// counter's expiry.
const qCounterLua = `
local function qcount(seq, w, keep)
  local n = redis.call('INCR', seq)
  redis.call('DEL', w)
  redis.call('XADD', w, '0-' .. n, 'c', '')
  if keep == true then
    redis.call('PERSIST', seq)
  elseif keep == false then
    redis.call('PEXPIRE', seq, 60000)
    redis.call('PEXPIRE', w, 60000)
  else
    local ttl = redis.call('PTTL', seq)
    if ttl >= 0 then
      redis.call('PEXPIRE', w, math.max(ttl, 1))
    end
  end
  return n
end
`

// qSentinelLua keeps a task's entry hash and deadline zset in Redis's
// hashtable and skiplist encodings: while a key holds entries it also
// holds QBIG (a field, valued "1"; a member, scored -inf), longer than
// hash-max-listpack-value and zset-max-listpack-value (64 by default), so
// the server never keeps it as a listpack, whose field lookups are
// linear: with hash-max-listpack-entries at 512 (as some builds ship it),
// the HSET and HMGET of a 512-row claim took 1-2 ms each, quadratic in the
// rows, where the hashtable takes tens of microseconds. qprune deletes a
// key left holding only QBIG (s or z may be nil). QBIG never reads as an
// index: it is not a number.
const qSentinelLua = `
local QBIG = '~tq:hashtable' .. string.rep('~', 67)
local function qprune(s, z)
  if s and redis.call('HLEN', s) == 1 and redis.call('HEXISTS', s, QBIG) == 1 then
    redis.call('DEL', s)
  end
  if z and redis.call('ZCARD', z) == 1 and redis.call('ZSCORE', z, QBIG) then
    redis.call('DEL', z)
  end
end
`
