package redis

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/tqgo/tqgo/backends"
)

// The WATCH-guarded transactions of Prepare and Commit (see prepareFresh
// and commitFast), on the engine's own connections when it has them: each
// sends about 2,000 arguments for 1024 rows, which go-redis writes one
// interface value at a time (measured: 0.6 ms for a transaction the server
// runs in 0.3 ms), and go-redis's Watch takes a round trip of its own
// where a plain connection pipelines WATCH with the reads it guards.

// prepareFreshRaw is prepareFresh on the engine's own connection of a
// standalone server: it stores the bare entries of keys, new rows taking
// indexes from the counter, if the partition has no rows. ok false: it has.
func (m *Meta) prepareFreshRaw(ctx context.Context, raw *rawConns, partition string, pk partKeys, keys []string, tail, token string) (base int64, ok bool, _ error) {
	n := int64(len(keys))
	next, parts := m.counterKeys()
	err := raw.do(ctx, func(c *rawConn) error {
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
		m.s.watched()
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
			req = req.str(k).bareEntry(ix, tail)
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
		m.s.watched()
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

// prepareRaw is Prepare with plain commands on the engine's own connection
// of a standalone server, for a partition that has rows (prepareScript
// does the same in Lua, at about 2.9 ms of server time for 1024 existing
// rows, most of it Lua's own per-argument work). It WATCHes the row hash,
// the token and the fields' generation hashes, reads the rows and their
// generations, draws indexes for new keys, and writes the reservations in
// one MULTI/EXEC. ok false: another writer changed a watched key in
// between (nothing was written; the indexes drawn are skipped).
func (m *Meta) prepareRaw(ctx context.Context, raw *rawConns, partition string, pk partKeys, keys, fields []string, sig string) (_ *preparedBatch, ok bool, _ error) {
	nk, nf := len(keys), len(fields)
	gkeys := make([]string, nf)
	for fi, f := range fields {
		gkeys[fi] = pk.base + ":g:" + f
	}
	next, parts := m.counterKeys()
	b := &preparedBatch{sig: sig, keys: slices.Clone(keys), res: make([]backends.Reservation, nk), entries: make([]string, nk)}
	err := raw.do(ctx, func(c *rawConn) error {
		req := request(c.cmd[:0]).cmd(append([]string{"WATCH", pk.r, pk.c}, gkeys...)...)
		req = req.array(2 + nk).str("HMGET").str(pk.r)
		for _, k := range keys {
			req = req.str(k)
		}
		for _, g := range gkeys {
			req = req.array(2 + nk).str("HMGET").str(g)
			for _, k := range keys {
				req = req.str(k)
			}
		}
		req = req.cmd("GET", pk.c)
		if err := c.send(req); err != nil {
			return err
		}
		if err := c.status("OK"); err != nil {
			return err
		}
		entries, err := c.bulks(nk)
		if err != nil {
			return err
		}
		gens := make([][][]byte, nf)
		for fi := range gens {
			if gens[fi], err = c.bulks(nk); err != nil {
				return err
			}
		}
		token, err := c.bulk()
		if err != nil {
			return err
		}
		m.s.watched()
		nNew := 0
		for _, e := range entries {
			if e == nil {
				nNew++
			}
		}
		var base int64
		if nNew > 0 {
			if err := c.send(request(c.cmd[:0]).cmd("INCRBY", next, strconv.Itoa(nNew))); err != nil {
				return err
			}
			top, err := c.integer()
			if err != nil {
				return err
			}
			base = top - int64(nNew)
		}
		// The reservations, and the transaction that records them.
		zero := make(map[string]uint64, nf) // new rows share one read-only map
		for _, f := range fields {
			zero[f] = 0
		}
		tail := entryTail(sig)
		newRows := request(nil)
		nextGens := make([]request, nf)
		oldRows := 0
		for i, e := range entries {
			r := &b.res[i]
			if e == nil {
				r.Index, r.Gens = uint64(base), zero
				var ix [indexLen]byte
				binary.BigEndian.PutUint64(ix[:], uint64(base))
				newRows = newRows.str(keys[i]).bareEntry(ix, tail)
				base++
				continue
			}
			oldRows++
			b.entries[i] = string(e)
			idx, err := entryIndex(e)
			if err != nil {
				return err
			}
			head, err := entryHead(e)
			if err != nil {
				return err
			}
			r.Index, r.Gens = idx, make(map[string]uint64, nf)
			for fi, f := range fields {
				var gen uint64
				if g := gens[fi][i]; g != nil {
					if gen, err = strconv.ParseUint(string(g), 10, 64); err != nil {
						return fmt.Errorf("%w: generation %q of key %q field %q", ErrCorrupt, g, keys[i], f)
					}
				} else if bytes.Contains(head[indexLen+2:], []byte("\x00"+f+"\x00")) {
					gen = 1 // the row's first Prepare reserved 0 (its signature)
				}
				r.Gens[f] = gen
				nextGens[fi] = nextGens[fi].str(keys[i]).str(strconv.FormatUint(gen+1, 10))
			}
		}
		req = request(c.cmd[:0]).cmd("MULTI")
		queued := 0
		if oldRows > 0 {
			for fi, g := range gkeys {
				guard := oldRows >= 128
				n := 2 + 2*oldRows
				if guard {
					n += 2
				}
				req = req.array(n).str("HSET").str(g)
				if guard {
					req = req.str(listpackGuard).str(guardValue)
				}
				req = append(req, nextGens[fi]...)
				queued++
				if guard {
					req = req.cmd("HDEL", g, listpackGuard)
					queued++
				}
			}
			if nf > 0 {
				req = req.cmd(append([]string{"SADD", pk.f}, fields...)...)
				queued++
			}
		}
		if nNew > 0 {
			req = req.array(2 + 2*nNew).str("HSET").str(pk.r)
			req = append(req, newRows...)
			req = req.cmd("SADD", parts, partition)
			queued += 2
		}
		b.token = string(token)
		if token == nil {
			b.token = newToken()
			req = req.cmd("SET", pk.c, b.token)
			queued++
		}
		if err := c.send(req.cmd("EXEC")); err != nil {
			return err
		}
		return c.exec(queued)
	})
	switch {
	case errors.Is(err, errMoved):
		return nil, false, nil
	case err != nil:
		return nil, false, m.s.wrap(ctx, "prepare", err)
	}
	return b, true, nil
}

// watched runs the test hook between a transaction's watched reads and its
// MULTI, where another writer may change what was read.
func (s *Store) watched() {
	if s.opts.roundHook != nil {
		s.opts.roundHook("watched")
	}
}

// bareEntry appends the entry of a row prepared and never committed, as a
// bulk string: its index, then tail (see entryTail).
func (r request) bareEntry(index [indexLen]byte, tail string) request {
	r = append(r.bulkHeader(indexLen+len(tail)), index[:]...)
	r = append(r, tail...)
	return append(r, '\r', '\n')
}
