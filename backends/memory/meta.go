package memory

import (
	"context"
	"fmt"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tqgo/tqgo/backends"
)

// MetaStore keeps metadata in process. It is safe for concurrent use and
// locks per partition: writers of different partitions never contend.
// Rows it returns are shared and must be treated as read-only.
//
// For Garbage, Swept and Abandon it keeps a bit per pending reservation and
// the times of each cell's oldest and newest ones (Garbage judges the
// others by the newest's age), and a record of each garbage cell until it
// is reported swept (see Garbage and Swept). A partition is forgotten once
// it has no rows and no garbage.
type MetaStore struct {
	next   atomic.Uint64 // next global index, shared by every partition
	closed atomic.Bool
	epoch  time.Time // reservation times are durations since, on the monotonic clock

	mu    sync.RWMutex // guards parts (the map, not the partitions in it)
	parts map[string]*partition

	q    queues        // consumption (see queue.go)
	done chan struct{} // closed by Close: waiters return
}

var _ backends.MetaStore = (*MetaStore)(nil)

type partition struct {
	mu   sync.RWMutex // guards everything below and every metaRow in rows; readers share it
	rows map[string]*metaRow
	// dropped is set when the partition is removed from MetaStore.parts
	// (it emptied): a caller that fetched it before must fetch it again.
	dropped bool
	// pending counts the reservations of rows, so Garbage and Swept skip
	// the scan of rows when there are none.
	pending int
	// garbage is every cell known unreferenced and not yet swept, in the
	// order they became so (a commit's Superseded and Stale are one run).
	garbage []backends.Ref
	// orphans are the reservations of removed rows: aborted, but their
	// put may still be writing them, so they become garbage only once as
	// old as Garbage's olderThan.
	orphans []pendingRef
	// far are pending reservations of live rows pushed out of their
	// fieldGen's window (see fieldGen.pend); almost always empty.
	far []pendingRef
	// sorted is the committed rows by index, built by a reader and
	// dropped (set nil) by every commit and delete, which hold mu
	// exclusively.
	sorted atomic.Pointer[[]*backends.Row]
}

// empty reports whether the partition holds nothing worth keeping.
func (p *partition) empty() bool {
	return len(p.rows) == 0 && len(p.garbage) == 0 && len(p.orphans) == 0
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
	// pend has bit i set when generation next-1-i is reserved and not yet
	// committed or aborted: a reservation costs a bit. One pushed out of
	// the window (by window newer ones of the cell) moves to
	// partition.far.
	pend uint64
	// at is when the newest reservation was made, and old when the oldest
	// pending one in the window was, or later: a pending reservation is
	// taken to be as young as old (the oldest) or at (the others), which
	// it is no younger than, so Garbage never aborts one younger than its
	// olderThan, and an abandoned reservation is aborted in time even
	// while newer puts of its cell keep coming.
	at, old time.Duration
}

// window is how many of a field's newest generations pend tracks.
const window = 64

// pendingRef is a reservation kept apart from its fieldGen: a removed
// row's, or one pushed out of the window.
type pendingRef struct {
	ref backends.Ref
	at  time.Duration
}

// id is the cell the reservation names.
func (o pendingRef) id() backends.CellID { return o.ref.ID() }

// has reports whether gen is a pending reservation in the window.
func (g *fieldGen) has(gen uint64) bool {
	return gen < g.next && g.next-1-gen < window && g.pend>>(g.next-1-gen)&1 != 0
}

// drop clears gen from the window and reports whether it was pending.
func (g *fieldGen) drop(gen uint64) bool {
	if !g.has(gen) {
		return false
	}
	if gen == g.oldest() {
		g.old = g.at // the next oldest was made at old or later
	}
	g.pend &^= 1 << (g.next - 1 - gen)
	return true
}

// oldest returns the oldest generation pending in the window; pend must
// not be 0.
func (g *fieldGen) oldest() uint64 {
	return g.next - 1 - uint64(63-bits.LeadingZeros64(g.pend))
}

// when returns when pending gen is taken to have been reserved.
func (g *fieldGen) when(gen uint64) time.Duration {
	if gen == g.oldest() {
		return g.old
	}
	return g.at
}

// eachPending calls f with every generation pending in the window.
func (g *fieldGen) eachPending(f func(gen uint64)) {
	for m := g.pend; m != 0; m &= m - 1 {
		f(g.next - 1 - uint64(bits.TrailingZeros64(m)))
	}
}

// find returns field's place in r.gens, or -1. hint is where it likely
// sits (its place in the last row's or the call's fields).
func (r *metaRow) find(field string, hint int) int {
	if hint < len(r.gens) && r.gens[hint].field == field {
		return hint
	}
	return slices.IndexFunc(r.gens, func(g fieldGen) bool { return g.field == field })
}

// reserve returns the generation to write field at and reserves it at
// time at. hint is where field likely sits in r.gens (its position in the
// call's fields).
func (r *metaRow) reserve(p *partition, field string, hint int, at time.Duration) uint64 {
	i := r.find(field, hint)
	if i < 0 {
		i = len(r.gens)
		r.gens = append(r.gens, fieldGen{field: field})
	}
	g := &r.gens[i]
	switch {
	case g.pend == 0:
		g.old = at
	case g.pend>>(window-1) != 0: // the oldest leaves the window
		p.far = append(p.far, pendingRef{ref: backends.Ref{Index: r.index, Field: field, Gen: g.next - window}, at: g.old})
		g.old = g.at
	}
	gen := g.next
	g.next++
	g.pend = g.pend<<1 | 1
	g.at = at
	return gen
}

// unpend removes gen from field's reservations and reports whether it was
// one. It returns field's place in r.gens, or hint if it has none: the
// next row's hint.
func (r *metaRow) unpend(p *partition, field string, gen uint64, hint int) (int, bool) {
	i := r.find(field, hint)
	if i < 0 {
		return hint, false
	}
	if r.gens[i].drop(gen) {
		return i, true
	}
	if j := p.farIndex(r.index, field, gen); j >= 0 {
		p.far = slices.Delete(p.far, j, j+1)
		return i, true
	}
	return i, false
}

// farIndex returns where the cell sits in p.far, or -1.
func (p *partition) farIndex(index uint64, field string, gen uint64) int {
	if len(p.far) == 0 {
		return -1
	}
	return slices.IndexFunc(p.far, func(o pendingRef) bool {
		return o.ref.Index == index && o.ref.Gen == gen && o.ref.Field == field
	})
}

// NewMetaStore returns an empty store.
func NewMetaStore() *MetaStore {
	return &MetaStore{parts: make(map[string]*partition), epoch: time.Now(), done: make(chan struct{})}
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
		if !p.dropped {
			return p
		}
		p.mu.Unlock()
	}
}

// dropIfEmpty removes an emptied partition (no rows, no garbage) from the
// map, so a job that makes a partition per step does not grow the map
// forever. Lock order is m.mu before p.mu, everywhere.
func (m *MetaStore) dropIfEmpty(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.parts[name]
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.empty() {
		p.dropped = true
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
	at := time.Since(m.epoch)
	var (
		fresh     []metaRow  // new rows, allocated on first need
		freshGens []fieldGen // their generations, nf each
		gens      = make([]uint64, 2*nf)
		cur, prev = gens[:nf], gens[nf:]
		prevMap   map[string]uint64
	)
	p.pending += len(keys) * nf
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
			cur[j] = r.reserve(p, f, j, at)
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
// the updates and with each other (see backends.Merger). A field commits
// only under a pending reservation of its row (or as the row's committed
// generation again): anything else, an aborted reservation say, is an
// ErrConflict (see backends.MetaStore).
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
	var cells backends.UpdateCells
	for i := range updates {
		u := &updates[i]
		r := p.rows[u.Key]
		if r == nil || r.index != u.Index {
			return res, fmt.Errorf("%w: key %q in partition %q", backends.ErrConflict, u.Key, partition)
		}
		cs := cells.Of(u.Fields)
		for j := range cs {
			var ok bool
			if cs[j].Hint, ok = r.live(p, cs[j].Field, cs[j].Gen, cs[j].Hint); !ok {
				return res, fmt.Errorf("%w: key %q field %q in partition %q: generation %d is not reserved (aborted?)",
					backends.ErrConflict, u.Key, cs[j].Field, partition, cs[j].Gen)
			}
		}
		rows[i] = r
	}
	var (
		merge backends.Merger
		block []backends.Row
	)
	for i, r := range rows {
		u := &updates[i]
		cs := cells.Of(u.Fields)
		for j := range cs {
			var ok bool
			if cs[j].Hint, ok = r.unpend(p, cs[j].Field, cs[j].Gen, cs[j].Hint); ok {
				p.pending--
			}
		}
		if len(block) == 0 {
			block = make([]backends.Row, min(len(rows)-i, blockRows))
		}
		next := &block[0]
		block = block[1:]
		merge.Merge(next, r.view, u, &res)
		r.view = next
		p.sorted.Store(nil)
	}
	p.garbage = append(p.garbage, res.Superseded...)
	p.garbage = append(p.garbage, res.Stale...)
	low := updates[0].Index
	for _, u := range updates[1:] {
		low = min(low, u.Index)
	}
	m.q.committed(partition, low) // rows may be ready for a task: wake its waiters
	return res, nil
}

// live reports whether field may commit at gen: it is a pending
// reservation, or the generation already committed. It returns the
// field's place in r.gens (hint if not found), the next row's hint.
func (r *metaRow) live(p *partition, field string, gen uint64, hint int) (int, bool) {
	i := r.find(field, hint)
	if i < 0 {
		return hint, false // never reserved
	}
	if r.gens[i].has(gen) || p.farIndex(r.index, field, gen) >= 0 {
		return i, true
	}
	if r.view != nil {
		fi, ok := r.view.Fields[field]
		return i, ok && fi.Gen == gen
	}
	return i, false
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
	rows, err := m.sortedRows(ctx, partition)
	return slices.Clone(rows), err
}

// sortedRows returns the partition's committed rows by index, shared:
// the caller must not modify the slice. A partition keeps it until its
// next commit or delete, so that claims between writes do not sort it
// again.
func (m *MetaStore) sortedRows(ctx context.Context, partition string) ([]*backends.Row, error) {
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	p := m.part(partition, false, 0)
	if p == nil {
		return []*backends.Row{}, nil
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if s := p.sorted.Load(); s != nil {
		return *s, nil
	}
	out := make([]*backends.Row, 0, len(p.rows))
	for _, r := range p.rows {
		if r.view != nil {
			out = append(out, r.view)
		}
	}
	slices.SortFunc(out, func(a, b *backends.Row) int { return compareIndex(a.Index, b.Index) })
	// Readers sharing the lock may each build it; they build the same.
	p.sorted.Store(&out)
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

// Delete implements backends.MetaStore. The removed rows' cells become
// garbage (see backends.MetaStore): the committed ones at once, for the
// caller to delete and report swept, their reservations once old enough.
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
			p.retire(r)
			delete(p.rows, k)
			p.sorted.Store(nil)
			*r = metaRow{} // its block may live on: hold nothing
		}
	}
	p.garbage = backends.AppendRowRefs(p.growGarbage(out), out)
	empty := p.empty()
	p.mu.Unlock()
	m.q.deleted(partition, out)
	if empty {
		m.dropIfEmpty(partition)
	}
	return out, nil
}

// DeletePartition implements backends.MetaStore. The rows' cells become
// garbage as Delete's do; the partition is forgotten once none is left.
func (m *MetaStore) DeletePartition(ctx context.Context, partition string) ([]*backends.Row, error) {
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	p := m.lockPart(partition, false, 0)
	if p == nil {
		return nil, nil
	}
	out := make([]*backends.Row, 0, len(p.rows))
	for _, r := range p.rows {
		if r.view != nil {
			out = append(out, r.view)
		}
		p.retire(r)
	}
	p.garbage = backends.AppendRowRefs(p.growGarbage(out), out)
	p.rows = map[string]*metaRow{}
	p.sorted.Store(nil)
	empty := p.empty()
	p.mu.Unlock()
	m.q.deletedPartition(partition)
	if empty {
		m.dropIfEmpty(partition)
	}
	return out, nil
}

// retire records the reservations of a row being removed as orphans. Its
// committed cells become garbage in the order of backends.AppendRowRefs,
// which the caller appends for every row it removed at once, so that
// Swept of them in that order is one run.
func (p *partition) retire(r *metaRow) {
	for i := range r.gens {
		g := &r.gens[i]
		g.eachPending(func(gen uint64) {
			p.orphans = append(p.orphans, pendingRef{ref: backends.Ref{Index: r.index, Field: g.field, Gen: gen}, at: g.when(gen)})
		})
		p.pending -= bits.OnesCount64(g.pend)
	}
	p.far = slices.DeleteFunc(p.far, func(o pendingRef) bool {
		if o.ref.Index != r.index {
			return false
		}
		p.orphans = append(p.orphans, o)
		p.pending--
		return true
	})
}

// growGarbage returns p.garbage with room for the cells of rows.
func (p *partition) growGarbage(rows []*backends.Row) []backends.Ref {
	n := 0
	for _, r := range rows {
		n += len(r.Fields)
	}
	return slices.Grow(p.garbage, n)
}

// Close implements backends.MetaStore.
func (m *MetaStore) Close() error {
	if !m.closed.Swap(true) {
		close(m.done)
	}
	return nil
}
