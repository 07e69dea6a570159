package redis

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// The WATCH-guarded transactions of Prepare and Commit (see prepareFresh
// and commitFast), on the engine's own connections when it has them: each
// sends about 2,000 arguments for 1024 rows, which go-redis writes one
// interface value at a time (measured: 0.6 ms for a transaction the server
// runs in 0.3 ms), and go-redis's Watch takes a round trip of its own
// where a plain connection pipelines WATCH with the reads it guards.

// request builds a pipelined RESP2 request.
type request []byte

func (r request) array(n int) request {
	r = append(r, '*')
	r = strconv.AppendInt(r, int64(n), 10)
	return append(r, '\r', '\n')
}

func (r request) str(s string) request { return appendBulk(r, s) }

func (r request) bytes(b []byte) request {
	r = appendBulkHeader(r, len(b))
	r = append(r, b...)
	return append(r, '\r', '\n')
}

func (r request) cmd(args ...string) request {
	r = r.array(len(args))
	for _, a := range args {
		r = r.str(a)
	}
	return r
}

// send writes req on c, reusing c's request buffer afterwards.
func (c *rawConn) send(req request) error {
	c.cmd = req[:0]
	_, err := c.Write(req)
	return err
}

// status reads a reply that must be the status s ("OK", "QUEUED").
func (c *rawConn) status(s string) error {
	l, err := c.line()
	if err != nil {
		return err
	}
	if len(l) != 1+len(s) || l[0] != '+' || string(l[1:]) != s {
		return fmt.Errorf("%w: reply %q, want +%s", ErrCorrupt, l, s)
	}
	return nil
}

// integer reads an integer reply.
func (c *rawConn) integer() (int64, error) {
	l, err := c.line()
	if err != nil {
		return 0, err
	}
	if l[0] != ':' {
		return 0, fmt.Errorf("%w: reply %q, want an integer", ErrCorrupt, l)
	}
	n, err := strconv.ParseInt(string(l[1:]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: reply %q", ErrCorrupt, l)
	}
	return n, nil
}

// bulk reads a bulk string reply; nil for a nil reply.
func (c *rawConn) bulk() ([]byte, error) {
	n, err := c.header('$')
	if err != nil || n < 0 {
		return nil, err
	}
	b := make([]byte, n+2)
	if _, err := io.ReadFull(c.br, b); err != nil {
		return nil, err
	}
	return b[:n], nil
}

// exec reads the replies of MULTI, queued commands and EXEC: errMoved if
// EXEC applied nothing because a watched key changed, the first error
// reply of any command otherwise.
func (c *rawConn) exec(queued int) error {
	if err := c.status("OK"); err != nil {
		return err
	}
	var first error
	for range queued {
		if err := c.status("QUEUED"); err != nil {
			var se serverError
			if !errors.As(err, &se) {
				return err
			}
			if first == nil {
				first = err // EXEC will reply EXECABORT
			}
		}
	}
	n, err := c.header('*')
	if err != nil {
		if first != nil {
			return first
		}
		return err
	}
	if n < 0 {
		return errMoved
	}
	for range n {
		l, err := c.line()
		if err == nil && l[0] == '$' { // a bulk reply inside: skip its bytes
			var size int
			if size, err = strconv.Atoi(string(l[1:])); err == nil && size >= 0 {
				_, err = c.br.Discard(size + 2)
			}
		}
		if err != nil {
			var se serverError
			if !errors.As(err, &se) {
				return err
			}
			if first == nil {
				first = err
			}
		}
	}
	return first
}

// prepareFreshRaw is prepareFresh on the engine's own connection of a
// standalone server: it stores the bare entries of keys, new rows taking
// indexes from the counter, if the partition has no rows. ok false: it has.
func (m *Meta) prepareFreshRaw(ctx context.Context, raw *rawConns, partition string, pk partKeys, keys []string, tail, token string) (base int64, ok bool, _ error) {
	n := int64(len(keys))
	next, parts := m.counterKeys()
	err := raw.do(ctx, func(c *rawConn) error {
		c.deadline(ctx, raw.opt)
		req := request(c.cmd[:0]).cmd("WATCH", pk.r).cmd("EXISTS", pk.r).cmd("INCRBY", next, strconv.FormatInt(n, 10))
		if err := c.send(req); err != nil {
			return err
		}
		if err := c.status("OK"); err != nil {
			return err
		}
		exists, err := c.integer()
		if err != nil {
			return err
		}
		top, err := c.integer()
		if err != nil {
			return err
		}
		if exists != 0 {
			// The indexes drawn are skipped, as those of a failed put are.
			if err := c.send(request(c.cmd[:0]).cmd("UNWATCH")); err != nil {
				return err
			}
			if err := c.status("OK"); err != nil {
				return err
			}
			return errMoved
		}
		base = top - n
		guard := len(keys) >= 128
		args := 2 + 2*len(keys)
		if guard {
			args += 2
		}
		req = request(c.cmd[:0]).cmd("MULTI").array(args).str("HSET").str(pk.r)
		if guard {
			req = req.str(listpackGuard).str(guardValue)
		}
		var ix [indexLen]byte
		for i, k := range keys {
			binary.BigEndian.PutUint64(ix[:], uint64(base)+uint64(i))
			req = req.str(k)
			req = appendBulkHeader(req, indexLen+len(tail))
			req = append(append(append(req, ix[:]...), tail...), '\r', '\n')
		}
		queued := 3
		if guard {
			req = req.cmd("HDEL", pk.r, listpackGuard)
			queued++
		}
		req = req.cmd("SET", pk.c, token).cmd("SADD", parts, partition).cmd("EXEC")
		if err := c.send(req); err != nil {
			return err
		}
		return c.exec(queued)
	})
	switch {
	case errors.Is(err, errMoved):
		return 0, false, nil
	case err != nil:
		return 0, false, m.s.wrap(ctx, "prepare", err)
	}
	return base, true, nil
}

// commitFastRaw is commitFast on the engine's own connection of a
// standalone server.
func (m *Meta) commitFastRaw(ctx context.Context, raw *rawConns, pk partKeys, token string, fresh int, rows []commitRow, buf []byte, ends []int) (ok bool, _ error) {
	err := raw.do(ctx, func(c *rawConn) error {
		c.deadline(ctx, raw.opt)
		if err := c.send(request(c.cmd[:0]).cmd("WATCH", pk.c).cmd("GET", pk.c)); err != nil {
			return err
		}
		if err := c.status("OK"); err != nil {
			return err
		}
		cur, err := c.bulk()
		if err != nil {
			return err
		}
		if cur == nil || string(cur) != token {
			if err := c.send(request(c.cmd[:0]).cmd("UNWATCH")); err != nil {
				return err
			}
			if err := c.status("OK"); err != nil {
				return err
			}
			return errMoved
		}
		req := request(c.cmd[:0]).cmd("MULTI").array(2 + 2*len(rows)).str("HSET").str(pk.r)
		lo := 0
		for j := range rows {
			req = req.str(rows[j].key).bytes(buf[lo:ends[j]])
			lo = ends[j]
		}
		queued := 2
		if fresh > 0 {
			req = req.cmd("INCRBY", pk.n, strconv.Itoa(fresh))
			queued++
		}
		req = req.cmd("SET", pk.c, newToken()).cmd("EXEC")
		if err := c.send(req); err != nil {
			return err
		}
		return c.exec(queued)
	})
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, errMoved):
		return false, nil
	}
	return false, m.s.wrap(ctx, "commit", err)
}
