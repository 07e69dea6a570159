package redis

import (
	"context"
	"strconv"

	"github.com/tqgo/tqgo/backends"
)

var (
	_ backends.CachedLookup     = (*Meta)(nil)
	_ backends.ConfirmingReader = (*Store)(nil)
)

// cachedRows is the token of LookupCached: where the view was when it
// gave rows for keys.
type cachedRows struct {
	partition string
	v         *view
	epoch     string
	n         int64
	era       uint64
	keys      []string
	rows      []*backends.Row
}

// LookupCached implements backends.CachedLookup: the rows of keys as the
// partition's view holds them, if the Meta has a view of the partition's
// log.
func (m *Meta) LookupCached(partition string, keys []string) ([]*backends.Row, any, bool) {
	if m.closed.Load() {
		return nil, nil, false
	}
	m.mu.Lock()
	v := m.views[partition]
	if v != nil {
		m.tick++
		v.used = m.tick
	}
	m.mu.Unlock()
	if v == nil {
		return nil, nil, false
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.epoch == "" || v.epoch == badEpoch {
		return nil, nil, false
	}
	rows := v.committedRows(keys)
	return rows, &cachedRows{partition: partition, v: v, epoch: v.epoch, n: v.n, era: v.era, keys: keys, rows: rows}, true
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

// GetSplitConfirmed implements backends.ConfirmingReader. On the engine's
// own connection it sends the read of the log records the token's view
// lacks and the first MGET of the cells together: the log is read right
// before the cells, so if it holds nothing that changed the token's rows,
// the cells read are those of the partition's committed rows at that
// moment. Without its own connections, or for another Meta's token, it
// reports the rows not current.
func (s *Store) GetSplitConfirmed(ctx context.Context, meta backends.MetaStore, token any, keys []string, sizes []int, dst func() []backends.SplitValue) (bool, error) {
	t, ok := token.(*cachedRows)
	raw := s.rawPool()
	if m, own := meta.(*Meta); !ok || !own || m != s.meta || raw == nil || s.cluster {
		return false, nil
	}
	if err := s.check(ctx, keys, len(sizes)); err != nil {
		return false, err
	}
	if len(keys) == 0 {
		return true, nil
	}
	m := s.meta
	if err := m.check(ctx); err != nil {
		return false, err
	}
	skeys := m.readKeys(t.partition)
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
	if err := s.readRounds(ctx, raw, keys, func(i int) int { return sizes[i] }, dst, lead); err != nil {
		return false, s.wrap(ctx, "get", err)
	}
	reply, ok := log.([]any)
	if !ok {
		return false, nil // a script error: let the caller look the rows up
	}
	moved, err := m.catchUp(t.v, t.era, t.n, reply)
	if err != nil {
		return false, s.wrap(ctx, "get", err)
	}
	if moved || !t.current() {
		return false, nil
	}
	return true, nil
}
