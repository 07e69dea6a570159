package redis

import (
	"context"
	"fmt"
	"net"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends"
)

// bigBody is the body size from which putSplit hands a body to the kernel
// as its own buffer (writev) rather than copying it into the request.
// Measured with 1024 values: at 8 KiB, writev of every body took 7.2-8.9
// ms against 8.2-10.3 with copies (and 7.5-9.2 through go-redis); at
// 512 B either way took about 1.4 ms.
const bigBody = 1 << 10

// putSplit is Write on the engine's own connections, to a standalone
// server: one MSET per round (one command rather than a SET per key:
// measured, 1024 x 530 B through go-redis, 0.34 ms against 0.92 ms for
// pipelined SETs; the server pays per command, and an MSET applies all
// of its keys or none), writing each value's head and body from the
// caller's memory with writev, where go-redis would need them joined into
// one buffer and then copies that into its own write buffer. keys is not
// empty.
func (s *Store) putSplit(ctx context.Context, raw *rawConns, cells []backends.Cell) error {
	pre := s.dataPrefix()
	rounds := s.writeRounds(cells)
	// All rounds go as one pipeline on one connection: the server reads
	// the next round while it runs this one, as it does a client's
	// pipelined SETs, where rounds in turn on two connections left it
	// waiting for each round's reply to reach the client (64 x 1 MiB put
	// 15.1-17.4 -> 14.0-14.4 ms, alternated A/B; 8 KiB and 512 B alike).
	describe := func() []goredis.Cmder {
		cmds := make([]goredis.Cmder, len(rounds))
		for k, r := range rounds {
			cmds[k] = goredis.NewCmd(ctx, describeMSET([]any{"MSET"}, pre, cells[r.lo:r.hi])...)
		}
		return cmds
	}
	err := raw.Do(ctx, describe, func(c *rawConn) error {
		req, segs := c.Request(), []int(nil)
		ends := make([][2]int, len(rounds)) // where each round ends in req and segs
		for k, r := range rounds {
			req, segs = appendMSETRange(req, segs, pre, cells, "", r)
			ends[k] = [2]int{len(req), len(segs)}
		}
		c.Keep(req)
		from := [2]int{}
		for k, end := range ends {
			if k > 0 {
				// The client's timeouts bound each round's write, not the
				// whole pipeline (see readRounds).
				if err := c.RenewDeadline(ctx); err != nil {
					return err
				}
			}
			if err := writeRange(c, req, from[0], end[0], segs[from[1]:end[1]], cells); err != nil {
				return err
			}
			from = end
		}
		var first error
		for range rounds {
			// Each round's reply comes once the server has read it.
			if err := c.RenewDeadline(ctx); err != nil {
				return err
			}
			l, err := c.Line()
			backends.CountRoundTrips(ctx, 1)
			switch {
			case err == nil && string(l) != "+OK":
				err = fmt.Errorf("%w: MSET replied %q", ErrCorrupt, l)
			case err != nil:
				if _, isServer := err.(serverError); !isServer {
					return err // the stream is broken
				}
			}
			if first == nil {
				first = err
			}
			if err == nil && s.opts.roundHook != nil {
				s.opts.roundHook("set")
			}
		}
		return first
	})
	return s.wrap(ctx, "put", err)
}

// appendMSET appends an MSET of the data keys pre+keys[i] (and of marker
// to "1", unless it is "") to b: small pieces go into b, big bodies stay
// where they are; segs records, in order, which is which (ends into b, or
// a body's index as -1-i), for writeSegs.
func appendMSET(b request, segs []int, pre string, cells []backends.Cell, marker string) (request, []int) {
	return appendMSETRange(b, segs, pre, cells, marker, span{0, len(cells)})
}

// appendMSETRange is appendMSET of the items of r.
func appendMSETRange(b request, segs []int, pre string, cells []backends.Cell, marker string, r span) (request, []int) {
	pairs := r.hi - r.lo
	if marker != "" {
		pairs++
	}
	b = b.Array(1 + 2*pairs).Str("MSET")
	if marker != "" {
		b = b.Str(marker).Str("1")
	}
	for i := r.lo; i < r.hi; i++ {
		c := &cells[i]
		b = b.Key(pre, c.Key).BulkHeader(len(c.Head) + len(c.Body))
		b = append(b, c.Head...)
		if len(c.Body) >= bigBody {
			segs = append(segs, len(b), -1-i)
		} else {
			b = append(b, c.Body...)
		}
		b = append(b, '\r', '\n')
	}
	return b, segs
}

// writeSegs writes a request appendMSET built, with what was appended
// after it, in one write (writev when big bodies stay apart).
func writeSegs(c *rawConn, b request, segs []int, cells []backends.Cell) error {
	c.Keep(b)
	return writeRange(c, b, 0, len(b), segs, cells)
}

// writeRange writes b[from:to] with the bodies segs places in it (segs:
// positions in b, as appendMSET records them, all within the range).
func writeRange(c *rawConn, b request, from, to int, segs []int, cells []backends.Cell) error {
	if len(segs) == 0 {
		return c.Write(b[from:to])
	}
	bufs := make(net.Buffers, 0, len(segs)+1)
	for j := 0; j < len(segs); j += 2 {
		bufs = append(bufs, b[from:segs[j]], cells[-1-segs[j+1]].Body)
		from = segs[j]
	}
	bufs = append(bufs, b[from:to])
	return c.WriteBuffers(bufs)
}

// describeMSET appends, after args, the pairs of an MSET of the cells'
// data keys as hooks see them: each value is given as its length in
// bytes (an int), not its bytes.
func describeMSET(args []any, pre string, cells []backends.Cell) []any {
	for i := range cells {
		args = append(args, pre+cells[i].Key, len(cells[i].Head)+len(cells[i].Body))
	}
	return args
}
