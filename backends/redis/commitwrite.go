package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/tqgo/tqgo/backends"
)

var _ backends.Colocated = (*Meta)(nil)

// WriteCommit implements backends.Colocated: it writes the cells itself,
// over the connections it shares with its Store. When the server is
// standalone and the engine's own connections are on, the last write
// round's MSET and the commit's append go in one MULTI/EXEC on one
// connection, after the earlier rounds (if any) are written as Store.Write
// writes them: a put whose cells fit one round takes one round trip for
// cells and commit. The MSET also sets a marker key, which the append
// requires and deletes: a transaction runs every command it queued even
// when one fails at EXEC (an ACL changed meanwhile, say), and the marker
// makes the commit apply only with its cells. If the append finds the log
// moved on, the cells are written and the commit computes again as Commit
// does. Otherwise (a Cluster, the engine's own connections off,
// WithReplicas) it is Store.Write, then Commit.
func (m *Meta) WriteCommit(ctx context.Context, partition string, cells []backends.Cell, updates []backends.RowUpdate) (backends.CommitResult, error) {
	s := m.s
	ctx = s.traced(ctx)
	if err := m.check(ctx); err != nil {
		return backends.CommitResult{}, err
	}
	raw := s.rawPool()
	if raw == nil || s.cluster || s.opts.replicas > 0 || len(cells) == 0 || len(updates) == 0 {
		if err := s.write(ctx, cells); err != nil {
			return backends.CommitResult{}, err
		}
		return m.Commit(ctx, partition, updates)
	}
	keys, heads, bodies := splitCells(cells)
	for i := range cells {
		cells[i].Tag = ""
	}
	rounds := s.rounds(len(keys), s.opts.writeRoundBytes, 1, func(i int) int { return len(heads[i]) + len(bodies[i]) })
	if last := rounds[len(rounds)-1].lo; last > 0 {
		// The earlier rounds go as Write sends them; their receipt
		// makes the commit check that they are where it applies.
		if err := s.putSplit(ctx, raw, keys[:last], heads[:last], bodies[:last]); err != nil {
			return backends.CommitResult{}, err
		}
		keys, heads, bodies = keys[last:], heads[last:], bodies[last:]
	}
	record, err := commitRecord(updates)
	if err != nil {
		return backends.CommitResult{}, err
	}
	pre := s.dataPrefix()
	marker := pre + "!put:" + newEpoch()
	withData := func(ctx context.Context, skeys []string, args ...any) ([]any, error) {
		mkeys := append(slices.Clip(skeys), marker)
		margs := slices.Clone(args)
		margs[12] = "1" // marked
		// Any failure is settled by writeVia: a transaction sent again by
		// rawConns.do finds its own record, one that never ran is fenced.
		var script any
		err := raw.do(ctx, func(c *rawConn) error {
			req, segs := appendMSET(request(c.cmd[:0]).cmd("MULTI"), nil, pre, keys, heads, bodies, marker)
			// The append deletes the marker; when it does not run to
			// the end (a script error, a reply lost), the marker expires.
			req = req.cmd("PEXPIRE", marker, markerTTL)
			req = req.array(3 + len(mkeys) + len(margs)).str("EVALSHA").str(appendScript.Hash()).str(strconv.Itoa(len(mkeys)))
			for _, k := range mkeys {
				req = req.str(k)
			}
			for _, a := range margs {
				req = req.str(argString(a))
			}
			if err := c.writeSegs(req.cmd("EXEC"), segs, bodies); err != nil {
				return err
			}
			var err error
			script, err = c.execReply()
			backends.CountRoundTrips(ctx, 1)
			return err
		})
		if err != nil {
			return nil, err
		}
		if se, ok := script.(serverError); ok {
			if strings.HasPrefix(string(se), "NOSCRIPT") {
				// The cells and marker are written (EXEC ran the MSET);
				// the script is not loaded yet: append without the
				// marker, and drop it.
				reply, err := m.runAppend(ctx, skeys, args...)
				_ = s.client.Del(ctx, marker).Err()
				return reply, err
			}
			return nil, se
		}
		// The MSET ran: if the append finds the log moved on, the next
		// attempts go without the cells, and must find them where they
		// apply (see receipts.go).
		s.receipts.add(keys[len(keys)-1])
		reply, ok := script.([]any)
		if !ok {
			return nil, fmt.Errorf("%w: append replied %v", ErrCorrupt, script)
		}
		if status, _ := replyString(reply, 0); status == "nodata" {
			// The MSET failed at EXEC, so the append did nothing.
			return nil, errors.New("the put's cells were not written (its MSET failed in the transaction)")
		}
		if s.opts.roundHook != nil {
			s.opts.roundHook("set")
		}
		return reply, nil
	}
	res, err := m.commitVia(ctx, partition, updates, record, withData)
	if err != nil {
		return backends.CommitResult{}, s.wrap(ctx, "put", unwrapError(err))
	}
	return res, nil
}

// markerTTL is the lifetime of a put's marker, in milliseconds: the
// append runs in the same transaction, so any bound works; this one only
// keeps markers whose append failed from piling up.
const markerTTL = "600000"

// execReply reads the replies of MULTI, MSET, PEXPIRE, EVALSHA and EXEC
// and returns the script's reply (a serverError when the script failed).
// A command refused while queued (out of memory, say) aborts the
// transaction: its error is returned; so is the MSET's error at EXEC,
// after which the script found no marker and appended nothing.
func (c *rawConn) execReply() (any, error) {
	var queued error
	for _, want := range []string{"OK", "QUEUED", "QUEUED", "QUEUED"} {
		l, err := c.line()
		var se serverError
		switch {
		case errors.As(err, &se):
			if queued == nil {
				queued = se
			}
		case err != nil:
			return nil, err
		case string(l[1:]) != want:
			return nil, fmt.Errorf("%w: reply %q, want +%s", ErrCorrupt, l, want)
		}
	}
	v, err := c.value(0)
	if err != nil {
		if queued != nil {
			return nil, queued
		}
		return nil, err
	}
	replies, ok := v.([]any)
	if !ok || len(replies) != 3 {
		return nil, fmt.Errorf("%w: EXEC replied %v", ErrCorrupt, v)
	}
	if se, ok := replies[0].(serverError); ok {
		return nil, se
	}
	return replies[2], nil
}

// argString is a script argument as go-redis would send it.
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

// unwrapError returns the cause of an *Error, which Store.wrap wraps
// again with the put's operation name.
func unwrapError(err error) error {
	var e *Error
	if errors.As(err, &e) && e == err {
		return e.Err
	}
	return err
}
