package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	goredis "github.com/redis/go-redis/v9"

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
	for i := range cells {
		cells[i].Tag = ""
	}
	rounds := s.writeRounds(cells)
	if last := rounds[len(rounds)-1].lo; last > 0 {
		// The earlier rounds go as Write sends them; their receipt
		// makes the commit check that they are where it applies.
		if err := s.putSplit(ctx, raw, cells[:last]); err != nil {
			return backends.CommitResult{}, err
		}
		cells = cells[last:]
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
		// the pool's retry (resp.Pool.Do) finds its own record, one that
		// never ran is fenced.
		var script any
		describe := func() []goredis.Cmder {
			eval := append([]any{"EVALSHA", appendScript.Hash(), len(mkeys)}, describeKeys(nil, "", mkeys)...)
			return []goredis.Cmder{
				goredis.NewStatusCmd(ctx, "MULTI"),
				goredis.NewCmd(ctx, describeMSET([]any{"MSET", marker, 1}, pre, cells)...),
				goredis.NewCmd(ctx, "PEXPIRE", marker, markerTTL),
				goredis.NewCmd(ctx, append(eval, margs...)...),
				goredis.NewSliceCmd(ctx, "EXEC"),
			}
		}
		err := raw.Do(ctx, describe, func(c *rawConn) error {
			req, segs := appendMSET(c.Request().Cmd("MULTI"), nil, pre, cells, marker)
			// The append deletes the marker; when it does not run to
			// the end (a script error, a reply lost), the marker expires.
			req = req.Cmd("PEXPIRE", marker, markerTTL)
			req = req.Array(3 + len(mkeys) + len(margs)).Str("EVALSHA").Str(appendScript.Hash()).Str(strconv.Itoa(len(mkeys)))
			for _, k := range mkeys {
				req = req.Str(k)
			}
			for _, a := range margs {
				req = req.Str(argString(a))
			}
			if err := writeSegs(c, req.Cmd("EXEC"), segs, cells); err != nil {
				return err
			}
			var err error
			script, err = execReply(c)
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
		s.receipts.add(cells[len(cells)-1].Key)
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
func execReply(c *rawConn) (any, error) {
	replies, err := c.ExecReply(3)
	if err != nil {
		return nil, err
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
