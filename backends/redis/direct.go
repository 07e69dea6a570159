package redis

import (
	"context"
	"fmt"
	"net"
	"unsafe"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/redis/internal/resp"
)

// The direct connections (package internal/resp), for what go-redis does
// slowly: values into and out of caller memory.
type (
	directConns = resp.Pool
	directConn  = resp.Conn
	request     = resp.Request
	serverError = resp.ServerError
)

// directPool returns the Store's direct connections, shared with its Log,
// or nil when everything goes through go-redis: on a Cluster or a Ring,
// with WithDirectConnections(false) or a direct pool size of 0, or with a
// client that has an OnConnect hook or streaming credentials.
func (s *Store) directPool() *directConns {
	s.directOnce.Do(func() {
		c, ok := s.client.(*goredis.Client)
		if !ok || s.opts.noDirect {
			return
		}
		opt := c.Options()
		if opt.Dialer == nil || opt.OnConnect != nil || opt.StreamingCredentialsProvider != nil {
			return
		}
		size := s.opts.directPoolSize
		if size < 0 {
			size = directShare(opt.PoolSize)
		}
		if size < 1 {
			return
		}
		s.direct, _ = resp.NewPool(resp.Config{Options: opt, Size: size, Hooks: s.opts.hooks})
	})
	return s.direct
}

// directShare is how many of a pool of n connections are direct by
// default: half, rounded down.
func directShare(n int) int { return n / 2 }

// describeKeys returns the data keys pre+keys[i] as command arguments,
// after args, for the commands hooks see.
func describeKeys(args []any, pre string, keys []string) []any {
	for _, k := range keys {
		args = append(args, pre+k)
	}
	return args
}

// readDirect is Read on direct connections, to a standalone server: MGET
// rounds read straight into the cells' destinations, on one connection and
// on the calling goroutine (rounds on goroutines of their own measured
// slower, waking a core per round). ioDepth rounds are requested at a
// time, counting the one being read, so the server has the next MGET
// queued while its last reply drains, and holds at most ioDepth replies.
func (s *Store) readDirect(ctx context.Context, direct *directConns, cells []backends.ReadCell) error {
	pre := s.dataPrefix()
	rounds := s.rounds(len(cells), s.opts.readRoundBytes, minReadRoundKeys, func(i int) int { return len(cells[i].Head) + len(cells[i].Body) })
	describe := func() []goredis.Cmder {
		cmds := make([]goredis.Cmder, len(rounds))
		for k, r := range rounds {
			keys := backends.ReadCellKeys(cells[r.lo:r.hi])
			cmds[k] = goredis.NewCmd(ctx, describeKeys([]any{"MGET"}, pre, keys)...)
		}
		return cmds
	}
	return direct.Do(ctx, describe, func(c *directConn) error {
		sent := 0
		// sendUpTo writes the requests of rounds [sent, n) in one write
		// and prefaults their destinations.
		sendUpTo := func(n int) error {
			req, from := c.Request(), sent
			for ; sent < n; sent++ {
				r := rounds[sent]
				req = appendMGET(req, pre, cells[r.lo:r.hi])
			}
			if err := c.Send(req); err != nil {
				return err
			}
			prefault(cells[rounds[from].lo:rounds[n-1].hi])
			return nil
		}
		if err := sendUpTo(min(len(rounds), s.opts.ioDepth)); err != nil {
			return err
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
			err := readMGET(c, cells[r.lo:r.hi])
			backends.CountRoundTrips(ctx, 1)
			if err != nil {
				return err
			}
			if s.opts.roundHook != nil {
				s.opts.roundHook("get")
			}
		}
		return nil
	})
}

// appendMGET appends an MGET of the data keys pre+cells[i].Key to b.
func appendMGET(b request, pre string, cells []backends.ReadCell) request {
	b = b.Array(1 + len(cells)).Str("MGET")
	for i := range cells {
		b = b.Key(pre, cells[i].Key)
	}
	return b
}

// readMGET reads the reply of an MGET of the cells' keys into the cells,
// as Store.Read documents.
func readMGET(c *directConn, dst []backends.ReadCell) error {
	n, err := c.Header('*')
	if err != nil {
		return err
	}
	if n != len(dst) {
		return fmt.Errorf("%w: MGET of %d keys replied %d values", ErrCorrupt, len(dst), n)
	}
	for i := range dst {
		d := &dst[i]
		if d.Found, d.Value, err = c.BulkInto(d.Head, d.Body); err != nil {
			return err
		}
		if d.Found && d.Value == nil && len(d.Head)+len(d.Body) == 0 {
			d.Value = []byte{} // every value, with no destination
		}
	}
	return nil
}

// prefault writes a byte of every page of the cells' destinations (theirs
// to fill, undefined until read) while the server works on the requests
// that fill them: fresh memory costs a page fault per page on first write,
// which would otherwise come one by one as the replies are read in.
func prefault(cells []backends.ReadCell) {
	const page = 4 << 10
	var next uintptr // the first address not yet known touched
	for i := range cells {
		b := cells[i].Body
		if len(b) == 0 {
			continue
		}
		start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
		end := start + uintptr(len(b))
		if start < next && end <= next {
			continue
		}
		off := 0
		if start < next {
			off = int(next - start)
		}
		for ; off < len(b); off += page {
			b[off] = 0
		}
		next = end
	}
}

// bigBody is the body size from which writeDirect hands a body to the
// kernel as its own buffer (writev) rather than copying it into the
// request (measured with 1024 values: at 8 KiB writev was faster, at 512 B
// even).
const bigBody = 1 << 10

// writeDirect is Write on direct connections, to a standalone server: one
// MSET per round (the server pays per command: 1024 x 530 B through
// go-redis took 0.34 ms as one MSET, 0.92 ms as pipelined SETs), writing
// each value's head and body from the caller's memory, where go-redis
// would join them into one buffer and copy that into its own. cells is
// not empty.
func (s *Store) writeDirect(ctx context.Context, direct *directConns, cells []backends.Cell) error {
	pre := s.dataPrefix()
	rounds := s.writeRounds(cells)
	// All rounds go as one pipeline on one connection: the server reads
	// the next round while it runs this one (faster than rounds in turn
	// on two connections, for 1 MiB, 8 KiB and 512 B values alike).
	describe := func() []goredis.Cmder {
		cmds := make([]goredis.Cmder, len(rounds))
		for k, r := range rounds {
			cmds[k] = goredis.NewCmd(ctx, describeMSET([]any{"MSET"}, pre, cells[r.lo:r.hi])...)
		}
		return cmds
	}
	err := direct.Do(ctx, describe, func(c *directConn) error {
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
				// whole pipeline (see readDirect).
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
func writeSegs(c *directConn, b request, segs []int, cells []backends.Cell) error {
	c.Keep(b)
	return writeRange(c, b, 0, len(b), segs, cells)
}

// writeRange writes b[from:to] with the bodies segs places in it (segs:
// positions in b, as appendMSET records them, all within the range).
func writeRange(c *directConn, b request, from, to int, segs []int, cells []backends.Cell) error {
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
