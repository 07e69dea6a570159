package redis

import (
	"context"
	"strconv"

	"github.com/tqgo/tqgo/backends"
)

// cachedRows is where a partition's view was when it gave rows for keys.
type cachedRows struct {
	v     *view
	epoch string
	n     int64
	era   uint64
	keys  []string
	rows  []*backends.Row
}

// cached returns the rows of keys as the partition's view holds them; ok
// false when the Meta has no view of the partition's log.
func (m *Meta) cached(partition string, keys []string) (_ *cachedRows, ok bool) {
	m.mu.Lock()
	v := m.views[partition]
	if v != nil {
		m.tick++
		v.used = m.tick
	}
	m.mu.Unlock()
	if v == nil {
		return nil, false
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.epoch == "" || v.epoch == badEpoch {
		return nil, false
	}
	rows := v.committedRows(keys)
	return &cachedRows{v: v, epoch: v.epoch, n: v.n, era: v.era, keys: keys, rows: rows}, true
}

// current reports whether the view, brought up to date by a read of the
// log, still holds the token's rows: the same Row of every key (a commit,
// a delete or a snapshot of the partition makes new ones).
func (t *cachedRows) current() bool {
	v := t.v
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.epoch == t.epoch && v.n == t.n && v.era == t.era {
		return true // nothing was appended
	}
	for i, k := range t.keys {
		r := v.rows[k]
		if r == nil || r.row != t.rows[i] {
			return false
		}
	}
	return true
}

// maxConfirmAttempts bounds the reads ReadRows makes against its view's
// copy of the rows before it looks them up: each failed one brings the
// view up to date, so a second fails only when another writer changed the
// rows again meanwhile.
const maxConfirmAttempts = 3

// ReadRows implements backends.Colocated. On the engine's own connection
// it calls plan with the rows as the partition's view holds them, and
// sends the read of the log records the view lacks together with the
// first MGET of the cells: the log is read right before the cells, so if
// it holds nothing that changed those rows (the usual case: nothing was
// appended), the cells read are those of the partition's committed rows
// at that moment, in one round trip. Otherwise the view, now caught up,
// gives the rows again, plan is called with them, and the cells are read
// again (up to maxConfirmAttempts reads; then, or when the Meta has no view
// of the partition, or on a Cluster, Lookup then Store.Read: two round
// trips). When plan fails on the view's copy, the rows are looked up and
// plan is called with them: only its error on current rows is returned.
func (m *Meta) ReadRows(ctx context.Context, partition string, keys []string, plan func(rows []*backends.Row) ([]backends.ReadCell, error)) ([]*backends.Row, error) {
	s := m.s
	ctx = s.traced(ctx)
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	if raw := s.rawPool(); raw != nil && !s.cluster && len(keys) > 0 {
		for range maxConfirmAttempts {
			t, ok := m.cached(partition, keys)
			if !ok {
				break
			}
			cells, err := plan(t.rows)
			if err != nil {
				// The copy may be stale (a field another process
				// added since): plan gets the rows as they are.
				break
			}
			current, again, err := m.readConfirmed(ctx, raw, partition, t, cells)
			if err != nil {
				return nil, err
			}
			if current {
				return t.rows, nil
			}
			if !again {
				break
			}
		}
	}
	rows, err := m.Lookup(ctx, partition, keys)
	if err != nil {
		return nil, err
	}
	cells, err := plan(rows)
	if err != nil {
		return nil, err
	}
	if err := s.read(ctx, cells); err != nil {
		return nil, err
	}
	return rows, nil
}

// readConfirmed reads cells into their destinations, with the read of the
// log records t's view lacks in the same request, and reports whether t's
// rows were still the partition's committed rows when the cells were read
// (the destinations are undefined otherwise). again false: the log read
// failed (a script not loaded yet, say), and the caller looks the rows up.
func (m *Meta) readConfirmed(ctx context.Context, raw *rawConns, partition string, t *cachedRows, cells []backends.ReadCell) (current, again bool, _ error) {
	s := m.s
	skeys := m.readKeys(partition)
	var log any
	// The log read rides with the first round; the other rounds follow
	// on the same connection (cells are immutable once committed: read
	// early or late, a committed cell is the same).
	lead := &leadRead{
		add: func(req request) request {
			req = req.Array(3 + len(skeys) + 2).Str("EVALSHA").Str(readScript.Hash()).Str(strconv.Itoa(len(skeys)))
			for _, k := range skeys {
				req = req.Str(k)
			}
			return req.Str(t.epoch).Str(strconv.FormatInt(t.n, 10))
		},
		reply: func(c *rawConn) error {
			v, err := c.Value()
			if err != nil {
				if _, isServer := err.(serverError); !isServer {
					return err
				}
				v = err // NOSCRIPT: read the cells all the same, the stream stays in step
			}
			log = v
			return nil
		},
		args: func() []any {
			return append(describeKeys([]any{"EVALSHA", readScript.Hash(), len(skeys)}, "", skeys), t.epoch, t.n)
		},
	}
	if err := s.readRounds(ctx, raw, cells, lead); err != nil {
		return false, false, s.wrap(ctx, "get", err)
	}
	reply, ok := log.([]any)
	if !ok {
		return false, false, nil
	}
	moved, err := m.catchUp(t.v, t.era, t.n, reply)
	if err != nil {
		return false, false, s.wrap(ctx, "get", err)
	}
	if moved || !t.current() {
		return false, true, nil
	}
	return true, false, nil
}
