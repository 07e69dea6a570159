package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends"
)

// Log is the Redis engine's backends.Log: per partition, a stream of
// opaque records that the server numbers (N, dense from 1) and stamps
// with its clock, a snapshot that replaces the entries before it, and the
// prefix's global index counter and partition registry, which the rest of
// the engine shares. LAYOUT.md gives every key, field and script, enough
// for a program in another language to read and append.
// Store.Log returns it; on a standalone server it is a *CellLog, which
// also implements backends.LogCells.
//
// Every call is one script on the partition's slot (log_scripts.go): an
// Append finds the log's last number, appends, and replies with the log
// after the caller's position, in one round trip; a Read replies with
// that tail alone. On a standalone server the append script also draws
// the records' global indexes (INCRBY) and registers a log it creates
// (SADD). On a Cluster, where the counter and the registry live in
// another slot, an Append that reserves indexes, or that may create the
// log (the caller's position is the start, or this Log has not
// registered the partition yet), first sends one pipeline to the
// counter's slot (SADD, INCRBY for all the call's records), and an append
// that created the log registers it again after (a delete racing with it
// may have unregistered it between the two).
//
// On a standalone server with direct connections (and without
// WithReplicas) an Append's script goes on those connections, as
// AppendCells does, not through go-redis.
//
// An Append sent twice appends once: the script appends nothing when the
// first record's ID is already among the entries after the caller's
// position, and replies as the first send would have (go-redis resends a
// command whose reply it lost; direct connections resend a request that
// failed on a connection that sat idle, before any reply). It looks no
// further: records compacted into a snapshot between the two sends would
// be appended again. A request whose reply was lost (a reset connection,
// a timeout) returns an error matching backends.ErrOutcomeUnknown, and so
// does any failure after a send that may have run (a resend refused, a
// dial refused after go-redis's retries); one that never left (a first
// dial refused, a closed client) or that the server refused (a script
// error, a key of the wrong type, a missing marker, missing receipts)
// another error. With WithReplicas, an
// Append sends WAIT on the same connection after its script, and fewer
// acknowledgements than asked make an error matching both
// ErrNotReplicated and backends.ErrOutcomeUnknown.
//
// A Read with a wait reads first; finding nothing after its position, it
// blocks in XREAD BLOCK on the stream, from its position, on a connection
// of a client of its own (see waitClient), with the read script pipelined
// after the XREAD, so that the entries that woke it come in the same round
// trip, read atomically and checked against the position. A Read with a
// wait from the very end that this Log's last waiting Read of the
// partition returned (a watcher waiting again) skips the first read: its
// first round's XREAD returns at once with whatever came since. A round
// blocks at most logRecheck, so that a log deleted and begun anew under a
// waiting reader (whose numbers do not pass the reader's until it grows
// as long) is noticed within it. Close ends waiting Reads at once, with
// backends.ErrClosed; a context that ends ends its Read at once too (its
// round's connection is released when the XREAD ends).
//
// Entry.Data and Tail.Snapshot alias the memory of the server's reply,
// which nothing else holds.
type Log struct {
	s      *Store
	closed atomic.Bool
	done   chan struct{} // closed by Close

	mu       sync.Mutex // guards the fields below, and wg.Add against Close
	waits    goredis.UniversalClient
	ownWaits bool
	known    map[string]bool         // Cluster: partitions this Log registered
	ends     map[string]backends.Pos // see takeEnd
	wg       sync.WaitGroup          // wait rounds in flight
}

var _ backends.Log = (*Log)(nil)

// CellLog is the Log of a standalone server, whose cells live on the same
// server as the log: it also implements backends.LogCells (see
// AppendCells and ReadCells).
type CellLog struct{ *Log }

var _ backends.LogCells = (*CellLog)(nil)

// Log returns the partition logs kept in the same Redis, under the same
// prefix: a *CellLog on a standalone server, a *Log otherwise (a Cluster,
// a Ring, WithClusterSafe). Every call returns the same Log. It shares the
// client: a client that came from OpenURL is closed once the Store and
// its Log (if taken) are both closed. A Log taken after the Store was
// closed is closed.
func (s *Store) Log() backends.Log {
	s.logOnce.Do(func() {
		l := &Log{s: s, done: make(chan struct{})}
		for {
			n := s.openRefs.Load()
			if n <= 0 {
				l.closed.Store(true)
				close(l.done)
				break
			}
			if s.openRefs.CompareAndSwap(n, n+1) {
				break
			}
		}
		if s.cluster {
			s.log = l
		} else {
			s.log = &CellLog{l}
		}
	})
	return s.log
}

// WithTimeOffset makes the log's append script add f() to the server's
// clock (TIME) when it stamps entries: for tests of rules judged by the
// log's time, such as lease expiry, which move the clock without
// waiting. f is called once per Append; nil is no offset. The offset
// reaches the server in microseconds.
func WithTimeOffset(f func() time.Duration) Option {
	return func(o *options) error {
		o.timeOffset = f
		return nil
	}
}

// Close ends waiting Reads (with backends.ErrClosed), closes the Log's
// wait client, and releases the Log's share of the Store's client. Later
// calls return backends.ErrClosed.
func (l *Log) Close() error {
	if l.closed.Swap(true) {
		return nil
	}
	close(l.done)
	l.mu.Lock()
	waits, own := l.waits, l.ownWaits
	l.waits = nil
	l.mu.Unlock()
	if waits != nil && own {
		_ = waits.Close() // ends blocked XREADs at once
	}
	l.wg.Wait()
	return l.s.release()
}

func (l *Log) check(ctx context.Context) error {
	if l.closed.Load() {
		return backends.ErrClosed
	}
	return ctx.Err()
}

// logKeys are the stream and the snapshot of partition.
func (l *Log) logKeys(partition string) []string {
	base := l.s.partBase(partition)
	return []string{base + ":log", base + ":snap"}
}

// maxLogNumber bounds indexes and entry numbers: Lua numbers are doubles.
const maxLogNumber = 1<<53 - 1

// checkRecords returns the indexes recs reserve together, or
// backends.ErrInvalid.
func checkRecords(recs []backends.Record) (uint64, error) {
	var need uint64
	for i := range recs {
		if recs[i].ID == 0 {
			return 0, fmt.Errorf("%w: record %d has ID 0", backends.ErrInvalid, i)
		}
		if recs[i].Indexes > maxLogNumber-need {
			return 0, fmt.Errorf("%w: records reserve more than 2^53 indexes", backends.ErrInvalid)
		}
		need += recs[i].Indexes
	}
	return need, nil
}

func posArgs(p backends.Pos) (n, id string) {
	if p.N == 0 {
		return "0", "0"
	}
	return strconv.FormatUint(p.N, 10), strconv.FormatUint(p.ID, 10)
}

// appendCall returns the keys and arguments of logAppendScript: base is
// the first index reserved (not inline), receipts the storage keys of
// cells the script requires (see CellLog.AppendCells), marker "" or the
// key the script requires and deletes.
func (l *Log) appendCall(partition string, from backends.Pos, recs []backends.Record, base uint64, receipts []string, marker string) ([]string, []any) {
	s := l.s
	keys := l.logKeys(partition)
	inline := "0"
	if !s.cluster {
		next, parts := s.counterKeys()
		keys = append(keys, next, parts)
		inline = "1"
	}
	keys = append(keys, s.dataKeys(receipts)...)
	marked := "0"
	if marker != "" {
		keys = append(keys, marker)
		marked = "1"
	}
	var offset int64
	if f := s.opts.timeOffset; f != nil {
		offset = f().Microseconds()
	}
	fn, fid := posArgs(from)
	args := make([]any, 0, 8+3*len(recs))
	args = append(args, fn, fid, strconv.FormatInt(offset, 10), partition, inline,
		strconv.FormatUint(base, 10), marked, strconv.Itoa(len(recs)))
	for i := range recs {
		r := &recs[i]
		data := r.Data
		if data == nil {
			data = []byte{}
		}
		args = append(args, strconv.FormatUint(r.ID, 10), strconv.FormatUint(r.Indexes, 10), data)
	}
	return keys, args
}

// Append implements backends.Log.
func (l *Log) Append(ctx context.Context, partition string, from backends.Pos, recs []backends.Record) (backends.Tail, error) {
	ctx = l.s.traced(ctx)
	if err := l.check(ctx); err != nil {
		return backends.Tail{}, err
	}
	if len(recs) == 0 {
		return l.read(ctx, "append", partition, from)
	}
	need, err := checkRecords(recs)
	if err != nil {
		return backends.Tail{}, err
	}
	return l.append(ctx, partition, from, recs, need, nil)
}

// append is Append of valid, non-empty recs on an open Log, requiring the
// cells of the storage keys receipts (see CellLog.AppendCells).
func (l *Log) append(ctx context.Context, partition string, from backends.Pos, recs []backends.Record, need uint64, receipts []string) (backends.Tail, error) {
	s := l.s
	var base uint64
	registered := false
	if s.cluster {
		var err error
		if base, registered, err = l.reserve(ctx, partition, from, need); err != nil {
			return backends.Tail{}, s.wrap(ctx, "append", err)
		}
	}
	keys, args := l.appendCall(partition, from, recs, base, receipts, "")
	var reply []any
	var acks func() error
	var err error
	goRedis := true
	switch dc := s.directPool(); {
	case s.opts.replicas > 0:
		reply, acks, err = s.evalWait(ctx, logAppendScript, keys, args...)
	case dc != nil:
		reply, err = l.appendDirect(ctx, dc, keys, args)
		goRedis = false
	default:
		reply, err = logAppendScript.Run(ctx, s.client, keys, args...).Slice()
	}
	if err != nil {
		return backends.Tail{}, l.appendError(ctx, err, goRedis)
	}
	return l.appended(ctx, partition, from, recs, reply, acks, registered)
}

// appendDirect runs the append script on direct connections (a
// standalone server): the same EVALSHA, without go-redis's costs. Like
// AppendCells, it is resent only when it failed on a connection that sat
// idle before any reply came (the script then finds its records); any
// other lost reply is an error matching backends.ErrOutcomeUnknown. A
// script not loaded yet is run through go-redis, which loads it.
func (l *Log) appendDirect(ctx context.Context, dc *directConns, keys []string, args []any) ([]any, error) {
	var reply any
	var refused error
	describe := func() []goredis.Cmder {
		return []goredis.Cmder{goredis.NewCmd(ctx, describeEval(logAppendScript.Hash(), keys, args)...)}
	}
	err := dc.Do(ctx, describe, func(c *directConn) error {
		if err := c.Send(appendEval(c.Request(), logAppendScript.Hash(), keys, args)); err != nil {
			return err
		}
		v, err := c.Value()
		var se serverError
		if errors.As(err, &se) && !se.Stale() {
			refused, err = se, nil // the stream stays in step
		}
		if err != nil {
			// A stale server's refusal (READONLY, LOADING, MASTERDOWN) goes
			// to the pool, which drops its idle connections, and says the
			// first send may have run if this was its resend.
			return err
		}
		reply = v
		backends.CountRoundTrips(ctx, 1)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if refused != nil {
		if goredis.HasErrorPrefix(refused, "NOSCRIPT") {
			return logAppendScript.Run(ctx, l.s.client, keys, args...).Slice()
		}
		return nil, refused
	}
	list, ok := reply.([]any)
	if !ok {
		return nil, fmt.Errorf("%w: append replied %v", ErrCorrupt, reply) // classed unknown by appendError
	}
	return list, nil
}

// appended decodes the reply of an append that ran (acks, if not nil,
// reports its replicas), and registers a partition the append created on
// a Cluster.
func (l *Log) appended(ctx context.Context, partition string, from backends.Pos, recs []backends.Record, reply []any, acks func() error, registered bool) (backends.Tail, error) {
	s := l.s
	t, dup, created, err := appendReply(reply, from, recs)
	if err != nil {
		// The script ran: whatever it did, its reply does not tell.
		return backends.Tail{}, &unknownOutcome{s.wrap(ctx, "append", err)}
	}
	if acks != nil {
		if dup {
			// Applied by an earlier send, whose WAIT reply was lost:
			// this connection's WAIT says nothing of it.
			return backends.Tail{}, &unknownOutcome{s.wrap(ctx, "append", &notReplicated{want: s.opts.replicas, err: errAckLost})}
		}
		if err := acks(); err != nil {
			return backends.Tail{}, &unknownOutcome{s.wrap(ctx, "append", err)}
		}
	}
	if s.cluster && created {
		// Registered before the append (registered), a delete of the
		// log that ran between may have unregistered it since; the
		// records are appended whatever this does.
		_, parts := s.counterKeys()
		if s.client.SAdd(ctx, parts, partition).Err() == nil {
			l.setKnown(partition, true)
		}
	} else if s.cluster && registered {
		l.setKnown(partition, true)
	}
	return t, nil
}

// reserve runs, on a Cluster, what an append needs of the counter's slot
// before its script: registering the partition when the append may create
// its log (from is the start, or this Log has not registered it), and
// drawing need indexes with one INCRBY, whose base it returns. With
// WithReplicas it waits for them too. Nothing is appended yet: every
// error is a definite one.
func (l *Log) reserve(ctx context.Context, partition string, from backends.Pos, need uint64) (base uint64, registered bool, _ error) {
	s := l.s
	register := from.N == 0 || !l.isKnown(partition)
	if !register && need == 0 {
		return 0, false, nil
	}
	next, parts := s.counterKeys()
	var pipe goredis.Pipeliner
	if s.opts.replicas > 0 {
		node, err := s.nodeFor(ctx, next)
		if err != nil {
			return 0, false, err
		}
		pipe = node.Pipeline()
	} else {
		pipe = s.client.Pipeline()
	}
	var sadd *goredis.IntCmd
	var incr *goredis.IntCmd
	var wait *goredis.Cmd
	if register {
		sadd = pipe.SAdd(ctx, parts, partition)
	}
	if need > 0 {
		incr = pipe.IncrBy(ctx, next, int64(need))
	}
	if s.opts.replicas > 0 {
		wait = pipe.Do(ctx, "WAIT", s.opts.replicas, waitMillis(s.opts.replicaTimeout))
	}
	_, _ = pipe.Exec(ctx)
	if sadd != nil {
		if err := sadd.Err(); err != nil {
			return 0, false, err
		}
	}
	if incr != nil {
		v, err := incr.Uint64()
		if err != nil {
			return 0, false, err
		}
		if v < need || v > maxLogNumber {
			return 0, false, fmt.Errorf("%w: index counter %s is %d after INCRBY %d", ErrCorrupt, next, v, need)
		}
		base = v - need
	}
	if wait != nil {
		got, err := wait.Int64()
		if err != nil {
			return 0, false, &notReplicated{want: s.opts.replicas, err: err}
		}
		if got < int64(s.opts.replicas) {
			return 0, false, &notReplicated{want: s.opts.replicas, got: got, timeout: s.opts.replicaTimeout}
		}
	}
	return base, register, nil
}

func (l *Log) isKnown(partition string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.known[partition]
}

func (l *Log) setKnown(partition string, known bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !known {
		delete(l.known, partition)
		return
	}
	if l.known == nil {
		l.known = map[string]bool{}
	}
	l.known[partition] = true
}

// appendError classes the failure of an append's request: one that may
// have reached the server matches backends.ErrOutcomeUnknown; one that
// found a receipt missing matches ErrCellsMissing.
// goRedis says the request went through go-redis, which resends a
// request whose connection failed (unless its MaxRetries is -1): a dial
// refused then may follow a send that ran.
func (l *Log) appendError(ctx context.Context, err error, goRedis bool) error {
	if isCellsMissing(err) {
		return l.s.wrap(ctx, "append", fmt.Errorf("%w: %w", ErrCellsMissing, err))
	}
	var short *notReplicated
	if errors.As(err, &short) || mayHaveRun(err, goRedis && l.s.retries) {
		return &unknownOutcome{l.s.wrap(ctx, "append", err)}
	}
	return l.s.wrap(ctx, "append", err)
}

// mayHaveRun reports whether a request that failed with err may have run
// on the server: every failure but a reply of the server's own (an error
// reply: the script failed, before writing anything, or never ran), a
// dial that failed, and a client or pool that gave no connection. With
// resent (go-redis, unless its MaxRetries is -1), the failure may be that
// of a resend whose first send ran: go-redis resends after a failed
// connection, a timeout, a pool timeout, or a server not serving yet
// (LOADING, READONLY, MASTERDOWN, CLUSTERDOWN, TRYAGAIN, ...), and returns
// the last attempt's failure, a refused dial say; then only an error
// reply it never resends (a script's refusal, NOSCRIPT, WRONGTYPE) says
// nothing ran.
func mayHaveRun(err error, resent bool) bool {
	if err == nil {
		return false
	}
	var re goredis.Error
	if errors.As(err, &re) {
		if !resent {
			return false
		}
		for _, p := range []string{"LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "NOREPLICAS", "ERR max number of clients"} {
			if strings.HasPrefix(re.Error(), p) {
				return true
			}
		}
		return false
	}
	if resent {
		return true
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return false
	}
	return !errors.Is(err, goredis.ErrClosed) && !errors.Is(err, goredis.ErrPoolTimeout) &&
		!errors.Is(err, backends.ErrClosed)
}

// Read implements backends.Log.
func (l *Log) Read(ctx context.Context, partition string, from backends.Pos, wait time.Duration) (backends.Tail, error) {
	ctx = l.s.traced(ctx)
	if err := l.check(ctx); err != nil {
		return backends.Tail{}, err
	}
	if wait > 0 && l.takeEnd(partition, from) {
		// A wait that returned this very position as the log's end: the
		// XREAD of the wait's first round returns at once if anything
		// came since, with the read.
		return l.wait(ctx, partition, from, wait)
	}
	t, err := l.read(ctx, "read", partition, from)
	if err != nil || wait <= 0 || t.Restart || len(t.Entries) > 0 {
		return t, err
	}
	return l.wait(ctx, partition, from, wait)
}

// keepEnds bounds the ends a Log remembers (see takeEnd).
const keepEnds = 1024

// setEnd remembers end, the end of the log of partition as a waiting Read
// just returned it.
func (l *Log) setEnd(partition string, end backends.Pos) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ends == nil || len(l.ends) >= keepEnds {
		l.ends = map[string]backends.Pos{}
	}
	l.ends[partition] = end
}

// takeEnd reports whether from is the end a waiting Read of partition
// last returned, and forgets it: a reader waiting again from there needs
// no read before its first wait round, which reads what came since.
func (l *Log) takeEnd(partition string, from backends.Pos) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	end, ok := l.ends[partition]
	if ok {
		delete(l.ends, partition)
	}
	return ok && end == from
}

// read runs the read script.
func (l *Log) read(ctx context.Context, op, partition string, from backends.Pos) (backends.Tail, error) {
	fn, fid := posArgs(from)
	reply, err := logReadScript.Run(ctx, l.s.client, l.logKeys(partition), fn, fid).Slice()
	if err != nil {
		return backends.Tail{}, l.s.wrap(ctx, op, err)
	}
	t, err := tailReply(reply, from)
	if err != nil {
		return backends.Tail{}, l.s.wrap(ctx, op, err)
	}
	return t, nil
}

// Compact implements backends.Log. On a Cluster emptying a log then
// unregisters the partition (SREM), and registers it again if the log is
// live by then (an Append that refilled it meanwhile may have registered
// it before the SREM).
func (l *Log) Compact(ctx context.Context, partition string, at backends.Pos, snapshot []byte) error {
	s := l.s
	ctx = s.traced(ctx)
	if err := l.check(ctx); err != nil {
		return err
	}
	keys := l.logKeys(partition)
	inline := "0"
	if !s.cluster {
		_, parts := s.counterKeys()
		keys = append(keys, parts)
		inline = "1"
	}
	keep := "0"
	if snapshot != nil {
		keep = "1"
	} else {
		snapshot = []byte{}
	}
	an, aid := posArgs(at)
	r, err := logCompactScript.Run(ctx, s.client, keys, an, aid, keep, snapshot, partition, inline).Int64()
	if err != nil {
		return s.wrap(ctx, "compact", err)
	}
	if (r == 2 || r == 3) && s.cluster {
		l.setKnown(partition, false)
		_, parts := s.counterKeys()
		if err := s.client.SRem(ctx, parts, partition).Err(); err != nil {
			return s.wrap(ctx, "compact", err)
		}
		// An append since the script made the log live again (it clears
		// the snapshot's e): register it again.
		n, err := s.client.Exists(ctx, keys[0]).Result()
		if err != nil {
			return s.wrap(ctx, "compact", err)
		}
		emptied, err := s.client.HExists(ctx, keys[1], "e").Result()
		if err != nil {
			return s.wrap(ctx, "compact", err)
		}
		if n > 0 && !emptied {
			if err := s.client.SAdd(ctx, parts, partition).Err(); err != nil {
				return s.wrap(ctx, "compact", err)
			}
		}
	}
	return nil
}

// Partitions implements backends.Log: the registry's members, sorted.
func (l *Log) Partitions(ctx context.Context) ([]string, error) {
	s := l.s
	ctx = s.traced(ctx)
	if err := l.check(ctx); err != nil {
		return nil, err
	}
	_, parts := s.counterKeys()
	names, err := s.client.SMembers(ctx, parts).Result()
	if err != nil {
		return nil, s.wrap(ctx, "partitions", err)
	}
	slices.Sort(names)
	return names, nil
}

// tailReply decodes the first five elements of a log script's reply: the
// log after from.
func tailReply(reply []any, from backends.Pos) (backends.Tail, error) {
	var t backends.Tail
	if len(reply) < 5 {
		return t, fmt.Errorf("%w: log script replied %d values", ErrCorrupt, len(reply))
	}
	restart, ok := reply[0].(int64)
	sn, ok2 := reply[1].(int64)
	sid, ok3 := reply[2].(string)
	list, ok4 := reply[4].([]any)
	if !ok || !ok2 || !ok3 || !ok4 || sn < 0 {
		return t, fmt.Errorf("%w: log script replied %v", ErrCorrupt, reply[:4])
	}
	next := from.N + 1
	if restart != 0 {
		id, err := strconv.ParseUint(sid, 10, 64)
		if err != nil {
			return t, fmt.Errorf("%w: snapshot of record ID %q", ErrCorrupt, sid)
		}
		t.Restart, t.Start = true, backends.Pos{N: uint64(sn), ID: id}
		switch v := reply[3].(type) {
		case nil:
		case string:
			t.Snapshot = stringBytes(v)
		default:
			return t, fmt.Errorf("%w: snapshot of type %T", ErrCorrupt, v)
		}
		next = t.Start.N + 1
	}
	if len(list) > 0 {
		t.Entries = make([]backends.Entry, len(list))
	}
	for i, x := range list {
		e := &t.Entries[i]
		if err := logEntry(x, e); err != nil {
			return t, err
		}
		if e.N != next+uint64(i) {
			return t, fmt.Errorf("%w: log entry %d where %d follows", ErrCorrupt, e.N, next+uint64(i))
		}
	}
	return t, nil
}

// appendReply decodes the reply of logAppendScript to recs, appended after
// from: the tail, with recs's entries last (Data nil), whether they were
// found appended by an earlier send (dup), and whether the append created
// the log.
func appendReply(reply []any, from backends.Pos, recs []backends.Record) (t backends.Tail, dup, created bool, _ error) {
	t, err := tailReply(reply, from)
	if err != nil {
		return t, false, false, err
	}
	if len(reply) < 10 {
		return t, false, false, fmt.Errorf("%w: append replied %d values", ErrCorrupt, len(reply))
	}
	first, ok := reply[5].(int64)
	at, ok2 := reply[6].(int64)
	base, ok3 := reply[7].(int64)
	j, ok4 := reply[8].(int64)
	c, ok5 := reply[9].(int64)
	if !ok || !ok2 || !ok3 || !ok4 || !ok5 || first < 0 || base < 0 || j < 0 || j > int64(len(t.Entries)) {
		return t, false, false, fmt.Errorf("%w: append replied %v", ErrCorrupt, reply[5:])
	}
	if j > 0 {
		// A resend: the records are entries j..j+len(recs)-1.
		lo := int(j - 1)
		if lo+len(recs) > len(t.Entries) {
			return t, false, false, fmt.Errorf("%w: the log holds record %d but not the %d after it", ErrCorrupt, recs[0].ID, len(recs)-1)
		}
		for i := range recs {
			e := &t.Entries[lo+i]
			if e.ID != recs[i].ID {
				return t, false, false, fmt.Errorf("%w: the log holds record %d followed by record %d, not %d", ErrCorrupt, recs[0].ID, e.ID, recs[i].ID)
			}
			e.Data = nil
		}
		t.Entries = t.Entries[:lo+len(recs)]
		return t, true, false, nil
	}
	if want := t.End(from).N + 1; uint64(first) != want {
		return t, false, false, fmt.Errorf("%w: appended at %d, after a tail ending at %d", ErrCorrupt, first, want-1)
	}
	t.Entries = slices.Grow(t.Entries, len(recs))
	b := uint64(base)
	for i := range recs {
		e := backends.Entry{N: uint64(first) + uint64(i), ID: recs[i].ID, Time: at}
		if n := recs[i].Indexes; n > 0 {
			e.Base = b
			b += n
		}
		t.Entries = append(t.Entries, e)
	}
	return t, false, c != 0, nil
}

// logEntry decodes an entry as XRANGE gives it: {"<N>-0", {field, value,
// ...}}.
func logEntry(x any, e *backends.Entry) error {
	pair, ok := x.([]any)
	if !ok || len(pair) != 2 {
		return fmt.Errorf("%w: log entry %v", ErrCorrupt, x)
	}
	id, ok := pair[0].(string)
	fv, ok2 := pair[1].([]any)
	if !ok || !ok2 || len(fv)%2 != 0 {
		return fmt.Errorf("%w: log entry %v", ErrCorrupt, x)
	}
	num, ok := strings.CutSuffix(id, "-0")
	n, err := strconv.ParseUint(num, 10, 64)
	if !ok || err != nil || n == 0 {
		return fmt.Errorf("%w: log entry ID %q", ErrCorrupt, id)
	}
	e.N = n
	var seen int
	for j := 0; j < len(fv); j += 2 {
		name, ok := fv[j].(string)
		val, ok2 := fv[j+1].(string)
		if !ok || !ok2 {
			return fmt.Errorf("%w: log entry %s field %v", ErrCorrupt, id, fv[j])
		}
		switch name {
		case "i":
			e.ID, err = strconv.ParseUint(val, 10, 64)
			seen |= 1
		case "t":
			e.Time, err = strconv.ParseInt(val, 10, 64)
			seen |= 2
		case "b":
			e.Base, err = strconv.ParseUint(val, 10, 64)
		case "d":
			e.Data = stringBytes(val)
			seen |= 4
		}
		if err != nil {
			return fmt.Errorf("%w: log entry %s field %s = %q", ErrCorrupt, id, name, val)
		}
	}
	if seen != 7 {
		return fmt.Errorf("%w: log entry %s lacks a field of i, t, d", ErrCorrupt, id)
	}
	return nil
}

// stringBytes is s as bytes, without a copy: a reply's value, which nothing
// else holds. An empty s is empty, not nil.
func stringBytes(s string) []byte {
	if len(s) == 0 {
		return []byte{}
	}
	return unsafeBytes(s)
}
