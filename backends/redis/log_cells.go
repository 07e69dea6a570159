package redis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends"
)

// AppendCells implements backends.LogCells. Cells written before the
// request that appends the records (earlier write rounds, or all of them
// without direct connections) are that request's receipts: the
// append script requires them (keys that must exist), so that after a
// failover to a replica that missed them the records are refused with
// ErrCellsMissing (nothing applied) instead of committing rows without
// cells. On the engine's own
// connections, the cells' last write round (an MSET, which also sets a
// marker key) and the append script go in one MULTI/EXEC, after the
// earlier rounds (if any) went as Store.Write sends them: cells that fit
// one round and their records take one round trip. The script requires
// the marker and deletes it, so that the records are appended only if the
// MSET ran (a transaction runs every queued command even when one fails
// at EXEC). With WithReplicas, WAIT follows EXEC in the same request.
// Without direct connections, it is Store.Write, then Append.
func (l *CellLog) AppendCells(ctx context.Context, partition string, from backends.Pos, cells []backends.Cell, recs []backends.Record) (backends.Tail, error) {
	s := l.s
	ctx = s.traced(ctx)
	if err := l.check(ctx); err != nil {
		return backends.Tail{}, err
	}
	need, err := checkRecords(recs)
	if err != nil {
		return backends.Tail{}, err
	}
	dc := s.directPool()
	if dc == nil || len(cells) == 0 || len(recs) == 0 {
		if err := s.write(ctx, cells); err != nil {
			return backends.Tail{}, err
		}
		if len(recs) == 0 {
			return l.read(ctx, "append", partition, from)
		}
		// Rounds through go-redis run side by side: every cell is a
		// receipt.
		return l.append(ctx, partition, from, recs, need, backends.CellKeys(cells))
	}
	for i := range cells {
		cells[i].Tag = ""
	}
	all := cells
	var receipts []string
	rounds := s.writeRounds(cells)
	if last := rounds[len(rounds)-1].lo; last > 0 {
		if err := s.writeDirect(ctx, dc, cells[:last]); err != nil {
			return backends.Tail{}, err
		}
		// The earlier rounds went in order on one connection: their last
		// cell is their receipt.
		receipts = []string{cells[last-1].Key}
		cells = cells[last:]
	}
	pre := s.dataPrefix()
	marker := pre + "!put:" + newMarker()
	keys, args := l.appendCall(partition, from, recs, 0, receipts, marker)
	replicas := s.opts.replicas
	waitArgs := []string{"WAIT", strconv.Itoa(replicas), strconv.FormatInt(waitMillis(s.opts.replicaTimeout), 10)}
	var script, waited any
	var waitErr error
	describe := func() []goredis.Cmder {
		cmds := []goredis.Cmder{
			goredis.NewStatusCmd(ctx, "MULTI"),
			goredis.NewCmd(ctx, describeMSET([]any{"MSET", marker, 1}, pre, cells)...),
			goredis.NewCmd(ctx, "PEXPIRE", marker, markerTTL),
			goredis.NewCmd(ctx, describeEval(logAppendScript.Hash(), keys, args)...),
			goredis.NewSliceCmd(ctx, "EXEC"),
		}
		if replicas > 0 {
			cmds = append(cmds, goredis.NewCmd(ctx, "WAIT", replicas, waitArgs[2]))
		}
		return cmds
	}
	err = dc.Do(ctx, describe, func(c *directConn) error {
		req, segs := appendMSET(c.Request().Cmd("MULTI"), nil, pre, cells, marker)
		// The script deletes the marker; when it does not run to the end
		// (a script error, a reply lost), the marker expires.
		req = req.Cmd("PEXPIRE", marker, markerTTL)
		req = appendEval(req, logAppendScript.Hash(), keys, args)
		req = req.Cmd("EXEC")
		if replicas > 0 {
			req = req.Cmd(waitArgs...)
		}
		if err := writeSegs(c, req, segs, cells); err != nil {
			return err
		}
		var err error
		if script, err = appendCellsReply(c); err != nil {
			return err
		}
		if replicas > 0 {
			waited, err = c.Value()
			var se serverError
			if errors.As(err, &se) {
				waited, waitErr, err = nil, se, nil
			}
		}
		backends.CountRoundTrips(ctx, 1)
		return err
	})
	if err != nil {
		return backends.Tail{}, l.appendError(ctx, err, false)
	}
	if se, ok := script.(serverError); ok {
		if isCellsMissing(se) {
			return backends.Tail{}, l.appendError(ctx, se, false)
		}
		if strings.HasPrefix(string(se), "NOSCRIPT") {
			// The cells and the marker are written (EXEC ran the MSET);
			// the script is not loaded yet: append without the marker
			// (Run loads it), and drop the marker.
			t, err := l.append(ctx, partition, from, recs, need, backends.CellKeys(all))
			_ = s.client.Del(ctx, marker).Err()
			return t, err
		}
		return backends.Tail{}, s.wrap(ctx, "append", se)
	}
	reply, ok := script.([]any)
	if !ok {
		return backends.Tail{}, &unknownOutcome{s.wrap(ctx, "append", fmt.Errorf("%w: append replied %v", ErrCorrupt, script))}
	}
	var acks func() error
	if replicas > 0 {
		acks = func() error {
			if waitErr != nil {
				return &notReplicated{want: replicas, err: waitErr}
			}
			got, ok := waited.(int64)
			if !ok {
				return &notReplicated{want: replicas, err: fmt.Errorf("%w: WAIT replied %v", ErrCorrupt, waited)}
			}
			if got < int64(replicas) {
				return &notReplicated{want: replicas, got: got, timeout: s.opts.replicaTimeout}
			}
			return nil
		}
	}
	return l.appended(ctx, partition, from, recs, reply, acks, false)
}

// ReadCells implements backends.LogCells: the read script and the cells'
// MGETs in one MULTI/EXEC, so that the cells are those of the instant the
// log was read. On direct connections the values are read
// straight into the cells' destinations, as Store.Read reads them;
// without them, through go-redis (a copy). The whole read is one
// transaction, whose reply the server holds whole before sending it: a
// read of many megabytes costs the server that memory.
func (l *CellLog) ReadCells(ctx context.Context, partition string, from backends.Pos, cells []backends.ReadCell) (backends.Tail, error) {
	s := l.s
	ctx = s.traced(ctx)
	if err := l.check(ctx); err != nil {
		return backends.Tail{}, err
	}
	if len(cells) == 0 {
		return l.read(ctx, "read", partition, from)
	}
	dc := s.directPool()
	for attempt := 0; ; attempt++ {
		var reply any
		var err error
		if dc != nil {
			reply, err = l.readCellsDirect(ctx, dc, partition, from, cells)
		} else {
			reply, err = l.readCellsGoRedis(ctx, partition, from, cells)
		}
		if err != nil {
			return backends.Tail{}, s.wrap(ctx, "get", err)
		}
		if se, ok := reply.(error); ok {
			if attempt == 0 && goredis.HasErrorPrefix(se, "NOSCRIPT") {
				if err := logReadScript.Load(ctx, s.client).Err(); err != nil {
					return backends.Tail{}, s.wrap(ctx, "get", err)
				}
				continue // the cells are read again with the log
			}
			return backends.Tail{}, s.wrap(ctx, "get", se)
		}
		list, ok := reply.([]any)
		if !ok {
			return backends.Tail{}, s.wrap(ctx, "get", fmt.Errorf("%w: read replied %v", ErrCorrupt, reply))
		}
		t, err := tailReply(list, from)
		if err != nil {
			return backends.Tail{}, s.wrap(ctx, "get", err)
		}
		return t, nil
	}
}

// readCellsDirect is ReadCells on a direct connection: it returns the
// read script's reply (an error value when the script failed in the
// transaction) and fills the cells.
func (l *CellLog) readCellsDirect(ctx context.Context, dc *directConns, partition string, from backends.Pos, cells []backends.ReadCell) (any, error) {
	s := l.s
	pre := s.dataPrefix()
	rounds := s.rounds(len(cells), s.opts.readRoundBytes, minReadRoundKeys, func(i int) int { return len(cells[i].Head) + len(cells[i].Body) })
	keys := l.logKeys(partition)
	fn, fid := posArgs(from)
	args := []any{fn, fid}
	describe := func() []goredis.Cmder {
		cmds := []goredis.Cmder{
			goredis.NewStatusCmd(ctx, "MULTI"),
			goredis.NewCmd(ctx, describeEval(logReadScript.Hash(), keys, args)...),
		}
		for _, r := range rounds {
			mget := []any{"MGET"}
			for i := r.lo; i < r.hi; i++ {
				mget = append(mget, pre+cells[i].Key)
			}
			cmds = append(cmds, goredis.NewCmd(ctx, mget...))
		}
		return append(cmds, goredis.NewSliceCmd(ctx, "EXEC"))
	}
	var script any
	err := dc.Do(ctx, describe, func(c *directConn) error {
		req := appendEval(c.Request().Cmd("MULTI"), logReadScript.Hash(), keys, args)
		for _, r := range rounds {
			req = appendMGET(req, pre, cells[r.lo:r.hi])
		}
		if err := c.Send(req.Cmd("EXEC")); err != nil {
			return err
		}
		prefault(cells)
		queued := 1 + len(rounds)
		if err := queuedReplies(c, queued); err != nil {
			return err
		}
		var err error
		script, err = c.Value()
		var se serverError
		if errors.As(err, &se) {
			script, err = se, nil // the stream stays in step
		}
		if err != nil {
			return err
		}
		var failed error
		for _, r := range rounds {
			if err := readMGET(c, cells[r.lo:r.hi]); err != nil {
				if !errors.As(err, &se) {
					return err
				}
				failed = firstErr(failed, se) // one error line: the stream stays in step
			}
		}
		backends.CountRoundTrips(ctx, 1)
		return failed
	})
	return script, err
}

// appendCellsReply reads the replies of MULTI, MSET, PEXPIRE, EVALSHA and
// EXEC, each of EXEC's replies on its own (an entry of the script's reply
// nests deeper than Conn.Value reads within another reply), and returns
// the script's reply, a serverError when the script failed. A command
// refused while queued aborts the transaction: its error is returned; so
// is the MSET's error at EXEC, after which the script found no marker and
// appended nothing.
func appendCellsReply(c *directConn) (any, error) {
	if err := queuedReplies(c, 3); err != nil {
		return nil, err
	}
	var out [3]any
	for i := range out {
		v, err := c.Value()
		var se serverError
		if errors.As(err, &se) {
			v, err = se, nil // the stream stays in step
		}
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	if se, ok := out[0].(serverError); ok {
		return nil, se
	}
	return out[2], nil
}

// firstErr returns a if it is not nil, else b.
func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// queuedReplies reads the replies of MULTI and of queued commands, and
// the header of EXEC's reply, which must hold queued replies. A command
// the server refused while queuing aborts the transaction: its error is
// returned.
func queuedReplies(c *directConn, queued int) error {
	var refused error
	for i := range 1 + queued {
		want := "+QUEUED"
		if i == 0 {
			want = "+OK"
		}
		l, err := c.Line()
		var se serverError
		switch {
		case errors.As(err, &se):
			refused = firstErr(refused, se)
		case err != nil:
			return err
		case string(l) != want:
			return fmt.Errorf("%w: reply %q, want %s", ErrCorrupt, l, want)
		}
	}
	n, err := c.Header('*')
	if err != nil {
		var se serverError
		if refused != nil && errors.As(err, &se) {
			return refused // EXECABORT: the refused command says why
		}
		return err
	}
	if n != queued {
		return fmt.Errorf("%w: EXEC of %d commands replied %d", ErrCorrupt, queued, n)
	}
	return nil
}

// readCellsGoRedis is ReadCells through go-redis: MULTI, the read script,
// an MGET per round, EXEC. It returns the script's reply (an error value
// when the script failed) and fills the cells.
func (l *CellLog) readCellsGoRedis(ctx context.Context, partition string, from backends.Pos, cells []backends.ReadCell) (any, error) {
	s := l.s
	keys := l.logKeys(partition)
	fn, fid := posArgs(from)
	dk := s.dataKeys(backends.ReadCellKeys(cells))
	rounds := countRounds(len(dk), s.opts.roundKeys)
	var ev *goredis.Cmd
	mgets := make([]*goredis.SliceCmd, len(rounds))
	_, _ = s.client.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		ev = p.EvalSha(ctx, logReadScript.Hash(), keys, fn, fid)
		for k, r := range rounds {
			mgets[k] = p.MGet(ctx, dk[r.lo:r.hi]...)
		}
		return nil
	})
	reply, err := ev.Result()
	var re goredis.Error
	if errors.As(err, &re) {
		return err, nil
	}
	if err != nil {
		return nil, err
	}
	for k, r := range rounds {
		vals, err := mgets[k].Result()
		if err != nil {
			return nil, err
		}
		if len(vals) != r.hi-r.lo {
			return nil, fmt.Errorf("%w: MGET of %d keys replied %d values", ErrCorrupt, r.hi-r.lo, len(vals))
		}
		for j, v := range vals {
			var b []byte
			if str, ok := v.(string); ok {
				b = stringBytes(str)
			}
			backends.FillReadCell(&cells[r.lo+j], b)
		}
	}
	return reply, nil
}

// appendEval appends EVALSHA sha with keys and args (strings and byte
// slices) to req.
func appendEval(req request, sha string, keys []string, args []any) request {
	req = req.Array(3 + len(keys) + len(args)).Str("EVALSHA").Str(sha).Str(strconv.Itoa(len(keys)))
	for _, k := range keys {
		req = req.Str(k)
	}
	for _, a := range args {
		switch x := a.(type) {
		case []byte:
			req = append(req.BulkHeader(len(x)), x...)
			req = append(req, '\r', '\n')
		default:
			req = req.Str(argString(a))
		}
	}
	return req
}

// describeEval is EVALSHA sha with keys and args as hooks see it: a byte
// slice argument as its length.
func describeEval(sha string, keys []string, args []any) []any {
	out := append(describeKeys([]any{"EVALSHA", sha, len(keys)}, "", keys), args...)
	for i, a := range out {
		if b, ok := a.([]byte); ok {
			out[i] = len(b)
		}
	}
	return out
}

// markerTTL is how long, in milliseconds, a marker key outlives an
// AppendCells whose script never ran to delete it.
const markerTTL = "600000"

// newMarker returns a fresh random name for an AppendCells marker key.
func newMarker() string {
	return strconv.FormatUint(rand.Uint64(), 36) + strconv.FormatUint(rand.Uint64(), 36)
}

func argString(a any) string {
	switch x := a.(type) {
	case string:
		return x
	case int:
		return strconv.Itoa(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case uint64:
		return strconv.FormatUint(x, 10)
	}
	return fmt.Sprint(a)
}
