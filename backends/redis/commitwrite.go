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

var _ backends.CommitWriter = (*Store)(nil)

// PutSplitCommit implements backends.CommitWriter. When meta is the
// Store's own Meta, the server standalone and the cells one write round,
// it sends the cells' MSET and the commit's append in one MULTI/EXEC on
// the engine's own connection: one round trip less per put. The MSET also
// sets a marker key, which the append requires and deletes: a transaction
// runs every command it queued even when one fails at EXEC (an ACL changed
// meanwhile, say), and the marker makes the commit apply only with its
// cells. If the append finds the log moved on, the cells are written and
// the commit computes again as Commit does. Otherwise (a Cluster, the
// engine's own connections off, WithReplicas, more than one round) it is
// PutSplit, then meta.Commit.
func (s *Store) PutSplitCommit(ctx context.Context, meta backends.MetaStore, keys []string, heads, bodies [][]byte, partition string, updates []backends.RowUpdate) (backends.CommitResult, error) {
	m, own := meta.(*Meta)
	raw := s.rawPool()
	if !own || m != s.meta || raw == nil || s.cluster || s.opts.replicas > 0 || len(keys) == 0 || len(bodies) != len(keys) || len(heads) != len(keys) ||
		len(s.rounds(len(keys), s.opts.writeRoundBytes, 1, func(i int) int { return len(heads[i]) + len(bodies[i]) })) != 1 {
		if err := s.PutSplit(ctx, keys, heads, bodies); err != nil {
			return backends.CommitResult{}, err
		}
		return meta.Commit(ctx, partition, updates)
	}
	if err := s.check(ctx, keys, len(heads)); err != nil {
		return backends.CommitResult{}, err
	}
	if err := m.check(ctx); err != nil {
		return backends.CommitResult{}, err
	}
	if len(updates) == 0 {
		return backends.CommitResult{}, s.PutSplit(ctx, keys, heads, bodies)
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
		// the pool's retry (resp.Pool.Do) finds its own record, one that never ran is fenced.
		var script any
		describe := func() []goredis.Cmder {
			eval := append([]any{"EVALSHA", appendScript.Hash(), len(mkeys)}, describeKeys(nil, "", mkeys)...)
			return []goredis.Cmder{
				goredis.NewStatusCmd(ctx, "MULTI"),
				goredis.NewCmd(ctx, describeMSET([]any{"MSET", marker, 1}, pre, keys, heads, bodies)...),
				goredis.NewCmd(ctx, "PEXPIRE", marker, markerTTL),
				goredis.NewCmd(ctx, append(eval, margs...)...),
				goredis.NewSliceCmd(ctx, "EXEC"),
			}
		}
		err := raw.Do(ctx, describe, func(c *rawConn) error {
			req, segs := appendMSET(c.Request().Cmd("MULTI"), nil, pre, keys, heads, bodies, marker)
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
			if err := writeSegs(c, req.Cmd("EXEC"), segs, bodies); err != nil {
				return err
			}
			var err error
			script, err = execReply(c)
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
