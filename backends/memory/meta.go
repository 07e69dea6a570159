package memory

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/tqgo/tqgo/backends"
)

// MetaStore keeps metadata in process. It is safe for concurrent use and
// locks per partition: writers of different partitions never contend.
// Rows it returns are shared and must be treated as read-only.
type MetaStore struct {
	next   atomic.Uint64 // next global index, shared by every partition
	closed atomic.Bool

	mu    sync.RWMutex // guards parts (the map, not the partitions in it)
	parts map[string]*partition
}

var _ backends.MetaStore = (*MetaStore)(nil)

type partition struct {
	mu   sync.RWMutex // guards rows, dead and every metaRow in rows; readers share it
	rows map[string]*metaRow
	// dead is set when the partition is dropped from MetaStore.parts (it
	// emptied): a caller that fetched it before must fetch it again.
	dead bool
}

type metaRow struct {
	index   uint64
	view    *backends.Row     // the committed row, immutable; nil until committed
	nextGen map[string]uint64 // next generation to reserve, per field
}

// NewMetaStore returns an empty store.
func NewMetaStore() *MetaStore {
	return &MetaStore{parts: make(map[string]*partition)}
}

// part returns the partition, creating it when create is set (nil otherwise).
func (m *MetaStore) part(name string, create bool) *partition {
	m.mu.RLock()
	p := m.parts[name]
	m.mu.RUnlock()
	if p != nil || !create {
		return p
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if p = m.parts[name]; p == nil {
		p = &partition{rows: make(map[string]*metaRow)}
		m.parts[name] = p
	}
	return p
}

// lockPart returns the partition locked, skipping one that was dropped
// between lookup and lock. With create unset it may return nil.
func (m *MetaStore) lockPart(name string, create bool) *partition {
	for {
		p := m.part(name, create)
		if p == nil {
			return nil
		}
		p.mu.Lock()
		if !p.dead {
			return p
		}
		p.mu.Unlock()
	}
}

// dropIfEmpty removes an emptied partition from the map, so a job that
// makes a partition per step does not grow the map forever. Lock order is
// m.mu before p.mu, everywhere.
func (m *MetaStore) dropIfEmpty(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.parts[name]
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.rows) == 0 {
		p.dead = true
		delete(m.parts, name)
	}
}

func (m *MetaStore) check(ctx context.Context) error {
	if m.closed.Load() {
		return backends.ErrClosed
	}
	return ctx.Err()
}

// Prepare implements backends.MetaStore.
func (m *MetaStore) Prepare(ctx context.Context, partition string, keys, fields []string) ([]backends.Reservation, error) {
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	out := make([]backends.Reservation, len(keys))
	p := m.lockPart(partition, true)
	defer p.mu.Unlock()
	for i, k := range keys {
		r := p.rows[k]
		if r == nil {
			r = &metaRow{index: m.next.Add(1) - 1, nextGen: make(map[string]uint64)}
			p.rows[k] = r
		}
		gens := make(map[string]uint64, len(fields))
		for _, f := range fields {
			gens[f] = r.nextGen[f]
			r.nextGen[f]++
		}
		out[i] = backends.Reservation{Index: r.index, Gens: gens}
	}
	return out, nil
}

// Commit implements backends.MetaStore.
func (m *MetaStore) Commit(ctx context.Context, partition string, updates []backends.RowUpdate) (backends.CommitResult, error) {
	var res backends.CommitResult
	if err := m.check(ctx); err != nil {
		return res, err
	}
	if len(updates) == 0 {
		return res, nil
	}
	p := m.lockPart(partition, false)
	if p == nil {
		return res, fmt.Errorf("%w: partition %q was cleared", backends.ErrConflict, partition)
	}
	defer p.mu.Unlock()
	for _, u := range updates {
		if r := p.rows[u.Key]; r == nil || r.index != u.Index {
			return res, fmt.Errorf("%w: key %q in partition %q", backends.ErrConflict, u.Key, partition)
		}
	}
	for _, u := range updates {
		r := p.rows[u.Key]
		next := backends.MergeRow(r.view, &u, &res)
		r.view = next
	}
	return res, nil
}

// Lookup implements backends.MetaStore.
func (m *MetaStore) Lookup(ctx context.Context, partition string, keys []string) ([]*backends.Row, error) {
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	out := make([]*backends.Row, len(keys))
	p := m.part(partition, false)
	if p == nil {
		return out, nil
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	for i, k := range keys {
		if r := p.rows[k]; r != nil {
			out[i] = r.view
		}
	}
	return out, nil
}

// List implements backends.MetaStore.
func (m *MetaStore) List(ctx context.Context, partition string) ([]*backends.Row, error) {
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	p := m.part(partition, false)
	if p == nil {
		return []*backends.Row{}, nil
	}
	p.mu.RLock()
	out := make([]*backends.Row, 0, len(p.rows))
	for _, r := range p.rows {
		if r.view != nil {
			out = append(out, r.view)
		}
	}
	p.mu.RUnlock()
	slices.SortFunc(out, func(a, b *backends.Row) int { return compareIndex(a.Index, b.Index) })
	return out, nil
}

func compareIndex(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Partitions implements backends.MetaStore.
func (m *MetaStore) Partitions(ctx context.Context) ([]string, error) {
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	m.mu.RLock()
	names := make([]string, 0, len(m.parts))
	parts := make([]*partition, 0, len(m.parts))
	for n, p := range m.parts {
		names, parts = append(names, n), append(parts, p)
	}
	m.mu.RUnlock()
	out := names[:0]
	for i, p := range parts {
		p.mu.RLock()
		for _, r := range p.rows {
			if r.view != nil {
				out = append(out, names[i])
				break
			}
		}
		p.mu.RUnlock()
	}
	slices.Sort(out)
	return out, nil
}

// Delete implements backends.MetaStore.
func (m *MetaStore) Delete(ctx context.Context, partition string, keys []string) ([]*backends.Row, error) {
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	p := m.lockPart(partition, false)
	if p == nil {
		return nil, nil
	}
	var out []*backends.Row
	for _, k := range keys {
		if r := p.rows[k]; r != nil {
			if r.view != nil {
				out = append(out, r.view)
			}
			delete(p.rows, k)
		}
	}
	empty := len(p.rows) == 0
	p.mu.Unlock()
	if empty {
		m.dropIfEmpty(partition)
	}
	return out, nil
}

// DeletePartition implements backends.MetaStore.
func (m *MetaStore) DeletePartition(ctx context.Context, partition string) ([]*backends.Row, error) {
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	m.mu.Lock()
	p := m.parts[partition]
	delete(m.parts, partition)
	if p != nil {
		p.mu.Lock()
		p.dead = true
	}
	m.mu.Unlock()
	if p == nil {
		return nil, nil
	}
	defer p.mu.Unlock()
	var out []*backends.Row
	for _, r := range p.rows {
		if r.view != nil {
			out = append(out, r.view)
		}
	}
	p.rows = map[string]*metaRow{}
	return out, nil
}

// Close implements backends.MetaStore.
func (m *MetaStore) Close() error {
	m.closed.Store(true)
	return nil
}
