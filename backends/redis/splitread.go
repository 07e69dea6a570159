package redis

import (
	"context"
	"fmt"
	"sync"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends"
)

var _ backends.SplitReader = (*Store)(nil)

// GetSplit implements backends.SplitReader. On a standalone server it sends
// MGETs on connections of its own and reads each reply value straight into
// its destination: go-redis allocates every value it reads (fresh memory
// the page-fault cost of which dominated large reads) and the caller then
// copied it again. On a Cluster, or when the client's connections need
// set-up this package cannot repeat (an OnConnect hook, streaming
// credentials), it reads through go-redis and copies.
func (s *Store) GetSplit(ctx context.Context, keys []string, dst []backends.SplitValue) error {
	if err := s.check(ctx, keys, len(dst)); err != nil {
		return err
	}
	if len(keys) == 0 {
		return nil
	}
	raw := s.rawPool()
	if raw == nil {
		return backends.GetSplitFromGet(ctx, s, keys, dst)
	}
	size := func(i int) int { return len(dst[i].Head) + len(dst[i].Body) }
	err := s.readRounds(ctx, raw, keys, size, func() []backends.SplitValue { return dst }, nil)
	return s.wrap(ctx, "get", err)
}

// leadRead is a command that goes ahead of the first round's MGET, in the
// same request: add appends it, reply reads its reply, args describes it
// to hooks.
type leadRead struct {
	add   func(request) request
	reply func(c *rawConn) error
	args  func() []any
}

// readRounds reads keys, whose values are expected size(i) bytes long, in
// MGET rounds into the destinations dst returns, on one of the engine's
// connections and on the calling goroutine: ioDepth rounds are requested
// at a time, counting the one being read, so with ioDepth >= 2 the server
// has the next MGET queued while its last reply drains, and it holds no
// more than ioDepth replies at once (one huge reply makes it fault fresh
// pages in).
// Rounds on goroutines of their own, one connection each, measured slower
// where a waiting core had to be woken for each round (this VM's vCPUs take
// up to 1.75 ms to wake after idling, measured by the team on the CI VM). dst is
// called once, after the first requests went out, so the caller's fresh
// memory is allocated while the server works. lead, if not nil, rides with
// the first round.
func (s *Store) readRounds(ctx context.Context, raw *rawConns, keys []string, size func(i int) int, dst func() []backends.SplitValue, lead *leadRead) error {
	pre := s.dataPrefix()
	rounds := s.rounds(len(keys), s.opts.readRoundBytes, minReadRoundKeys, size)
	getDst := sync.OnceValue(dst)
	describe := func() []goredis.Cmder {
		var cmds []goredis.Cmder
		if lead != nil {
			cmds = append(cmds, goredis.NewCmd(ctx, lead.args()...))
		}
		for _, r := range rounds {
			cmds = append(cmds, goredis.NewCmd(ctx, describeKeys([]any{"MGET"}, pre, keys[r.lo:r.hi])...))
		}
		return cmds
	}
	return raw.Do(ctx, describe, func(c *rawConn) error {
		sent := 0
		// sendUpTo writes the requests of rounds [sent, n) in one write.
		sendUpTo := func(n int) error {
			req := c.Request()
			if sent == 0 && lead != nil {
				req = lead.add(req)
			}
			for ; sent < n; sent++ {
				r := rounds[sent]
				req = appendMGET(req, pre, keys[r.lo:r.hi])
			}
			return c.Send(req)
		}
		if err := sendUpTo(min(len(rounds), s.opts.ioDepth)); err != nil {
			return err
		}
		if lead != nil {
			if err := lead.reply(c); err != nil {
				return err
			}
		}
		d := getDst()
		if len(d) != len(keys) {
			return fmt.Errorf("%w: %d destinations for %d keys", backends.ErrInvalid, len(d), len(keys))
		}
		for i, r := range rounds {
			if i > 0 {
				// The client's timeouts bound each round, as they would a
				// round of its own, not the whole call.
				if err := c.RenewDeadline(ctx); err != nil {
					return err
				}
			}
			if sent < len(rounds) && sent < i+s.opts.ioDepth {
				// Round i+ioDepth-1 goes out before round i's reply is
				// read: the server works on it meanwhile.
				if err := sendUpTo(sent + 1); err != nil {
					return err
				}
			}
			if err := readMGET(c, keys[r.lo:r.hi], d[r.lo:r.hi]); err != nil {
				return err
			}
			if s.opts.roundHook != nil {
				s.opts.roundHook("get")
			}
		}
		return nil
	})
}

// appendMGET appends an MGET of the data keys pre+keys[i] to b.
func appendMGET(b request, pre string, keys []string) request {
	b = b.Array(1 + len(keys)).Str("MGET")
	for _, k := range keys {
		b = b.Key(pre, k)
	}
	return b
}

// readMGET reads the reply of an MGET of keys into dst.
func readMGET(c *rawConn, keys []string, dst []backends.SplitValue) error {
	n, err := c.Header('*')
	if err != nil {
		return err
	}
	if n != len(keys) {
		return fmt.Errorf("%w: MGET of %d keys replied %d values", ErrCorrupt, len(keys), n)
	}
	for i := range dst {
		d := &dst[i]
		if d.Found, d.Other, err = c.BulkInto(d.Head, d.Body); err != nil {
			return err
		}
	}
	return nil
}
