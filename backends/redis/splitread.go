package redis

import (
	"context"
	"fmt"
	"io"

	"github.com/tqgo/tqgo/backends"
)

// leadRead is a command that goes ahead of the first round's MGET, in the
// same request: add appends it, reply reads its reply.
type leadRead struct {
	add   func(request) request
	reply func(c *rawConn) error
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
	return raw.do(ctx, func(c *rawConn) error {
		sent := 0
		// sendUpTo writes the requests of rounds [sent, n) in one write.
		sendUpTo := func(n int) error {
			req := request(c.cmd[:0])
			if sent == 0 && lead != nil {
				req = lead.add(req)
			}
			for ; sent < n; sent++ {
				r := rounds[sent]
				req = appendMGET(req, pre, cells[r.lo:r.hi])
			}
			return c.send(req)
		}
		if err := sendUpTo(min(len(rounds), s.opts.ioDepth)); err != nil {
			return err
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
				if err := c.renewDeadline(ctx, raw.opt); err != nil {
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
			err := c.readMGET(cells[r.lo:r.hi])
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
	b = b.array(1 + len(cells)).str("MGET")
	for i := range cells {
		b = b.key(pre, cells[i].Key)
	}
	return b
}

// readMGET reads the reply of an MGET of the cells' keys into the cells,
// as Store.Read documents.
func (c *rawConn) readMGET(dst []backends.ReadCell) error {
	n, err := c.header('*')
	if err != nil {
		return err
	}
	if n != len(dst) {
		return fmt.Errorf("%w: MGET of %d keys replied %d values", ErrCorrupt, len(dst), n)
	}
	for i := range dst {
		d := &dst[i]
		size, err := c.header('$')
		if err != nil {
			return err
		}
		d.Found, d.Value = size >= 0, nil
		switch {
		case size < 0:
			continue
		case size == len(d.Head)+len(d.Body) && size > 0:
			if _, err := io.ReadFull(c.br, d.Head); err != nil {
				return err
			}
			if _, err := io.ReadFull(c.br, d.Body); err != nil {
				return err
			}
		case size > maxBulk:
			return fmt.Errorf("%w: value of %d bytes", ErrCorrupt, size)
		default:
			d.Value = make([]byte, size)
			if _, err := io.ReadFull(c.br, d.Value); err != nil {
				return err
			}
		}
		if crlf, err := c.br.Peek(2); err != nil {
			return err
		} else if crlf[0] != '\r' || crlf[1] != '\n' {
			return fmt.Errorf("%w: value not ended by CRLF", ErrCorrupt)
		}
		if _, err := c.br.Discard(2); err != nil {
			return err
		}
	}
	return nil
}
