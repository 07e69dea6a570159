package redis

import (
	"context"
	"fmt"
	"unsafe"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends"
)

// leadRead is a command that goes ahead of the first round's MGET, in the
// same request: add appends it, reply reads its reply, args describes it
// to hooks.
type leadRead struct {
	add   func(request) request
	reply func(c *rawConn) error
	args  func() []any
}

// readRounds is Read on the engine's own connections, to a standalone
// server (go-redis allocates every value it reads, fresh memory the
// page-fault cost of which dominated large reads, and the caller then
// copied it again): MGET rounds read into the cells' destinations, on one
// connection and on the calling goroutine. ioDepth rounds are requested
// at a time, counting the one being read, so with ioDepth >= 2 the server
// has the next MGET queued while its last reply drains, and it holds no
// more than ioDepth replies at once (one huge reply makes it fault fresh
// pages in).
// Rounds on goroutines of their own, one connection each, measured slower
// where a waiting core had to be woken for each round (this VM's vCPUs take
// up to 1.75 ms to wake after idling, measured by the team on the CI VM).
// lead, if not nil, rides with the first round (alone when there are no
// cells).
func (s *Store) readRounds(ctx context.Context, raw *rawConns, cells []backends.ReadCell, lead *leadRead) error {
	pre := s.dataPrefix()
	rounds := s.rounds(len(cells), s.opts.readRoundBytes, minReadRoundKeys, func(i int) int { return len(cells[i].Head) + len(cells[i].Body) })
	describe := func() []goredis.Cmder {
		var cmds []goredis.Cmder
		if lead != nil {
			cmds = append(cmds, goredis.NewCmd(ctx, lead.args()...))
		}
		for _, r := range rounds {
			args := []any{"MGET"}
			for i := r.lo; i < r.hi; i++ {
				args = append(args, pre+cells[i].Key)
			}
			cmds = append(cmds, goredis.NewCmd(ctx, args...))
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
				req = appendMGET(req, pre, cells[r.lo:r.hi])
			}
			return c.Send(req)
		}
		if err := sendUpTo(min(len(rounds), s.opts.ioDepth)); err != nil {
			return err
		}
		for _, r := range rounds[:sent] {
			prefault(cells[r.lo:r.hi])
		}
		if lead != nil {
			err := lead.reply(c)
			if len(rounds) == 0 {
				backends.CountRoundTrips(ctx, 1)
			}
			if err != nil {
				return err
			}
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
				r := rounds[sent-1]
				prefault(cells[r.lo:r.hi])
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
func readMGET(c *rawConn, dst []backends.ReadCell) error {
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

// prefault writes a byte of every page of the cells' destinations, while
// the server works on the requests that fill them: fresh memory (a plain
// BatchGet's columns) costs a page fault per page on first write, which
// would otherwise come one after the other as the replies are read in.
// Destinations that follow each other in memory (a stacked column's rows)
// are touched once a page. The destinations are the caller's to fill, and
// undefined until read.
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
