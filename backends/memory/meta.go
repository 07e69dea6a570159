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

// blockRows is how many records (metaRows, committed Rows) Prepare and
// Commit allocate at once. A block is freed when none of its records is in
// use, so a surviving row may keep up to blockRows-1 dead records alive:
// Delete clears a deleted row's metaRow for that reason (a replaced Row
// cannot be cleared, a reader may hold it; its maps are mostly shared).
const blockRows = 64

type metaRow struct {
	index uint64
	view  *backends.Row // the committed row, immutable; nil until committed
	// gens is the next generation to reserve, per field. A slice, not a
	// map: rows have few fields, mostly reserved in the same order.
	gens []fieldGen
}

type fieldGen struct {
	field string
	next  uint64
}

// reserve returns the generation to write field at and reserves it. hint
// is where field likely sits in r.gens (its position in the call's fields).
func (r *metaRow) reserve(field string, hint int) uint64 {
	i := hint
	if i >= len(r.gens) || r.gens[i].field != field {
		i = slices.IndexFunc(r.gens, func(g fieldGen) bool { return g.field == field })
		if i < 0 {
			i = len(r.gens)
			r.gens = append(r.gens, fieldGen{field: field})
		}
	}
	g := r.gens[i].next
	r.gens[i].next++
	return g
}

// NewMetaStore returns an empty store.
func NewMetaStore() *MetaStore {
	return &MetaStore{parts: make(map[string]*partition)}
}

// part returns the partition, creating it when create is set (nil otherwise)
// with room for size rows.
func (m *MetaStore) part(name string, create bool, size int) *partition {
	m.mu.RLock()
	p := m.parts[name]
	m.mu.RUnlock()
	if p != nil || !create {
		return p
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if p = m.parts[name]; p == nil {
		p = &partition{rows: make(map[string]*metaRow, size)}
		m.parts[name] = p
	}
	return p
}

// lockPart returns the partition locked, skipping one that was dropped
// between lookup and lock. With create unset it may return nil; size is the
// rows a created partition has room for.
func (m *MetaStore) lockPart(name string, create bool, size int) *partition {
	for {
		p := m.part(name, create, size)
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

// Prepare implements backends.MetaStore. It allocates per block of rows,
// not per row: new rows' records come in blocks, and reservations with the
// same generations share one Gens map (rows of one batch usually do).
func (m *MetaStore) Prepare(ctx context.Context, partition string, keys, fields []string) ([]backends.Reservation, error) {
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	out := make([]backends.Reservation, len(keys))
	nf := len(fields)
	p := m.lockPart(partition, true, len(keys))
	defer p.mu.Unlock()
	var (
		fresh     []metaRow  // new rows, allocated on first need
		freshGens []fieldGen // their generations, nf each
		gens      = make([]uint64, 2*nf)
		cur, prev = gens[:nf], gens[nf:]
		prevMap   map[string]uint64
	)
	for i, k := range keys {
		r := p.rows[k]
		if r == nil {
			if len(fresh) == 0 {
				fresh = make([]metaRow, min(len(keys)-i, blockRows))
				freshGens = make([]fieldGen, nf*len(fresh))
			}
			r, fresh = &fresh[0], fresh[1:]
			// Capped at nf: a later new field reallocates rather than
			// spill into the next row's share.
			r.index, r.gens, freshGens = m.next.Add(1)-1, freshGens[:0:nf], freshGens[nf:]
			p.rows[k] = r
		}
		for j, f := range fields {
			cur[j] = r.reserve(f, j)
		}
		if prevMap == nil || !slices.Equal(cur, prev) {
			prevMap = make(map[string]uint64, nf)
			for j, f := range fields {
				prevMap[f] = cur[j]
			}
			cur, prev = prev, cur
		}
		out[i] = backends.Reservation{Index: r.index, Gens: prevMap}
	}
	return out, nil
}

// Commit implements backends.MetaStore. The rows it stores share maps with
// the updates and with each other (see backends.Merger).
func (m *MetaStore) Commit(ctx context.Context, partition string, updates []backends.RowUpdate) (backends.CommitResult, error) {
	var res backends.CommitResult
	if err := m.check(ctx); err != nil {
		return res, err
	}
	if len(updates) == 0 {
		return res, nil
	}
	p := m.lockPart(partition, false, 0)
	if p == nil {
		return res, fmt.Errorf("%w: partition %q was cleared", backends.ErrConflict, partition)
	}
	defer p.mu.Unlock()
	rows := make([]*metaRow, len(updates)) // checked, then updated
	for i, u := range updates {
		r := p.rows[u.Key]
		if r == nil || r.index != u.Index {
			return res, fmt.Errorf("%w: key %q in partition %q", backends.ErrConflict, u.Key, partition)
		}
		rows[i] = r
	}
	var (
		merge backends.Merger
		block []backends.Row
	)
	for i, r := range rows {
		if len(block) == 0 {
			block = make([]backends.Row, min(len(rows)-i, blockRows))
		}
		next := &block[0]
		block = block[1:]
		merge.Merge(next, r.view, &updates[i], &res)
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
	p := m.part(partition, false, 0)
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
	p := m.part(partition, false, 0)
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
	p := m.lockPart(partition, false, 0)
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
			*r = metaRow{} // its block may live on: hold nothing
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
