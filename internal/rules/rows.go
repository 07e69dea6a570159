package rules

import (
	"fmt"
	"math/bits"
	"slices"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
)

// The rows of a partition: keys to indexes, reservations, commits, field
// tables, tags and garbage, by metadata.MetaStore's rules.

// blockRows is how many records (rows, committed Rows) Prepare and Commit
// allocate at once. A block is freed when none of its records is in use,
// so a surviving row may keep up to blockRows-1 dead records alive: Delete
// clears a deleted row's record for that reason (a replaced Row cannot be
// cleared, a reader may hold it; its maps are mostly shared).
const blockRows = 64

type row struct {
	index uint64
	view  *metadata.Row // the committed row, immutable; nil until committed
	// gens is the next generation to reserve, per field. A slice, not a
	// map: rows have few fields, mostly reserved in the same order.
	gens []fieldGen
	// held is set while a new row holds room of the capacity before its
	// first commit (see capacity.go).
	held bool
	// since is when the row last gained a field (its first commit, or one
	// adding a field it had not): when it may have become ready for a
	// task, from which a group's deadline counts.
	since int64
}

type fieldGen struct {
	field string
	next  uint64
	// pend has bit i set when generation next-1-i is reserved and not yet
	// committed or aborted: a reservation costs a bit. One pushed out of
	// the window (by window newer ones of the cell) moves to
	// Partition.far.
	pend uint64
	// at is when the newest reservation was made, and old when the oldest
	// pending one in the window was, or later: a pending reservation is
	// taken to be as young as old (the oldest) or at (the others), which
	// it is no younger than, so an abort never takes one younger than its
	// cutoff, and an abandoned reservation is aborted in time even while
	// newer puts of its cell keep coming.
	at, old int64
	// size is the bytes the capacity counts for the field: its newest
	// write's once that committed, the largest of its cell's and its
	// pending writes' while writes are pending (an upper bound when one
	// is given up); nsize is the newest write's (see capacity.go).
	size, nsize int64
}

// window is how many of a field's newest generations pend tracks.
const window = 64

// pendingRef is a reservation kept apart from its fieldGen: a removed
// row's (an orphan), or one pushed out of the window.
type pendingRef struct {
	ref metadata.Ref
	at  int64
}

func (o pendingRef) id() metadata.CellID { return o.ref.ID() }

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
func (g *fieldGen) when(gen uint64) int64 {
	if gen == g.oldest() {
		return g.old
	}
	return g.at
}

func (g *fieldGen) eachPending(f func(gen uint64)) {
	for m := g.pend; m != 0; m &= m - 1 {
		f(g.next - 1 - uint64(bits.TrailingZeros64(m)))
	}
}

// find returns field's place in r.gens, or -1. hint is where it likely
// sits.
func (r *row) find(field string, hint int) int {
	if hint >= 0 && hint < len(r.gens) && r.gens[hint].field == field {
		return hint
	}
	return slices.IndexFunc(r.gens, func(g fieldGen) bool { return g.field == field })
}

// reserve returns the generation to write field at and reserves it at
// time at.
func (r *row) reserve(p *Partition, field string, hint int, at int64) uint64 {
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
		p.far = append(p.far, pendingRef{ref: metadata.Ref{Index: r.index, Field: field, Gen: g.next - window}, at: g.old})
		g.old = g.at
	}
	gen := g.next
	g.next++
	g.pend = g.pend<<1 | 1
	g.at = at
	return gen
}

// unpend removes gen from field's reservations and reports whether it was
// one. It returns field's place in r.gens (hint if it has none).
func (r *row) unpend(p *Partition, field string, gen uint64, hint int) (int, bool) {
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

// live reports whether field may commit at gen: a pending reservation,
// or the generation already committed.
func (r *row) live(p *Partition, field string, gen uint64, hint int) (int, bool) {
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

// handedOut reports whether the row's generation gen of field was ever
// reserved: it is below the field's next generation.
func (r *row) handedOut(field string, gen uint64) bool {
	i := r.find(field, 0)
	return i >= 0 && gen < r.gens[i].next
}

func (p *Partition) farIndex(index uint64, field string, gen uint64) int {
	if len(p.far) == 0 {
		return -1
	}
	return slices.IndexFunc(p.far, func(o pendingRef) bool {
		return o.ref.Index == index && o.ref.Gen == gen && o.ref.Field == field
	})
}

// NewKeys returns how many of keys have no row: the global indexes a
// Prepare of them takes.
func (p *Partition) NewKeys(keys []string) int {
	n := 0
	for _, k := range keys {
		if p.rows[k] == nil {
			n++
		}
	}
	return n
}

// Prepare reserves, at time now, a generation of each of fields for each
// of keys, giving a key without a row a new row whose index is base+j,
// j counting the new keys before it; sizes (nil, or one per cell,
// field-major) are the cells' bytes, for the capacity. It fails with
// ErrIndexes, changing nothing, when more than indexes keys are new, and
// with a *metadata.FullError (its Partition and Mark left for the caller)
// when the capacity has no room for the rows or bytes. Reservations with
// the same generations share one Gens map.
func (p *Partition) Prepare(now int64, keys, fields []string, sizes []int64, base uint64, indexes int) ([]metadata.Reservation, error) {
	p.tick(now)
	n := p.NewKeys(keys)
	if n > indexes {
		return nil, fmt.Errorf("%w: %d new keys, %d indexes", ErrIndexes, n, indexes)
	}
	if sizes != nil && len(sizes) != len(keys)*len(fields) {
		return nil, fmt.Errorf("%w: %d sizes for %d cells", backends.ErrInvalid, len(sizes), len(keys)*len(fields))
	}
	if full := p.room(keys, fields, sizes, n); full != nil {
		return nil, full
	}
	out := make([]metadata.Reservation, len(keys))
	nf := len(fields)
	var (
		fresh     []row      // new rows, allocated on first need
		freshGens []fieldGen // their generations, nf each
		gens      = make([]uint64, 2*nf)
		cur, prev = gens[:nf], gens[nf:]
		prevMap   map[string]uint64
	)
	p.pending += len(keys) * nf
	if len(p.rows) == 0 && len(keys) > 8 {
		// A partition filled anew: room for its rows at once, not by
		// doubling.
		p.rows = make(map[string]*row, len(keys))
	}
	for i, k := range keys {
		r := p.rows[k]
		if r == nil {
			if len(fresh) == 0 {
				fresh = make([]row, min(len(keys)-i, blockRows))
				freshGens = make([]fieldGen, nf*len(fresh))
			}
			r, fresh = &fresh[0], fresh[1:]
			// Capped at nf: a later new field reallocates rather than
			// spill into the next row's share.
			r.index, r.gens, freshGens = base, freshGens[:0:nf], freshGens[nf:]
			base++
			r.held, r.since = true, p.now // since: when it was prepared, until its first commit
			p.held++
			p.rows[k] = r
		}
		for j, f := range fields {
			cur[j] = r.reserve(p, f, j, p.now)
			var size int64
			if sizes != nil {
				size = sizes[j*len(keys)+i]
			}
			g := &r.gens[r.find(f, j)]
			g.nsize = size
			p.sized(g, max(g.size, size))
		}
		if prevMap == nil || !slices.Equal(cur, prev) {
			prevMap = make(map[string]uint64, nf)
			for j, f := range fields {
				prevMap[f] = cur[j]
			}
			cur, prev = prev, cur
		}
		out[i] = metadata.Reservation{Index: r.index, Gens: prevMap}
	}
	return out, nil
}

// Commit applies updates atomically: it fails with an error wrapping
// backends.ErrConflict, changing nothing, when a row was removed or
// re-indexed since its Prepare, or a field's generation is neither a
// pending reservation of the row nor its committed one; with
// backends.ErrReservationLost (which matches ErrConflict) when, besides,
// the partition never handed that generation out, or, for a row it no
// longer holds, knows none of the update's cells (see knows). The rows it
// stores share maps with the updates and with each other (see
// metadata.Merger): the caller must not modify the updates' maps.
func (p *Partition) Commit(now int64, updates []metadata.RowUpdate) (metadata.CommitResult, error) {
	p.tick(now)
	var res metadata.CommitResult
	if len(updates) == 0 {
		return res, nil
	}
	rows := make([]*row, len(updates)) // checked, then updated
	var cells metadata.UpdateCells
	for i := range updates {
		u := &updates[i]
		r := p.rows[u.Key]
		if r == nil || r.index != u.Index {
			if !p.knows(u) {
				return res, fmt.Errorf("%w: key %q", backends.ErrReservationLost, u.Key)
			}
			return res, fmt.Errorf("%w: key %q", backends.ErrConflict, u.Key)
		}
		cs := cells.Of(u.Fields)
		for j := range cs {
			var ok bool
			if cs[j].Hint, ok = r.live(p, cs[j].Field, cs[j].Gen, cs[j].Hint); !ok {
				err := backends.ErrConflict
				if !r.handedOut(cs[j].Field, cs[j].Gen) {
					err = backends.ErrReservationLost
				}
				return res, fmt.Errorf("%w: key %q field %q: generation %d is not reserved (aborted?)",
					err, u.Key, cs[j].Field, cs[j].Gen)
			}
		}
		rows[i] = r
	}
	var (
		merge metadata.Merger
		block []metadata.Row
	)
	if len(p.byIndex) == 0 && len(rows) > 8 {
		p.byIndex = make(map[uint64]*row, len(rows)) // as p.rows in Prepare
	}
	for i, r := range rows {
		u := &updates[i]
		cs := cells.Of(u.Fields)
		for j := range cs {
			var ok bool
			if cs[j].Hint, ok = r.unpend(p, cs[j].Field, cs[j].Gen, cs[j].Hint); ok {
				p.pending--
				if g := &r.gens[cs[j].Hint]; cs[j].Gen == g.next-1 {
					p.sized(g, g.nsize) // its newest write is its cell now
				}
			}
		}
		if len(block) == 0 {
			block = make([]metadata.Row, min(len(rows)-i, blockRows))
		}
		next := &block[0]
		block = block[1:]
		old, since := r.view, r.since
		merge.Merge(next, old, u, &res)
		r.view = next
		if old == nil || len(next.Fields) > len(old.Fields) {
			r.since = p.now // it gained a field: it may be ready for more tasks
		}
		p.committedSummary(r, old, since)
		if old == nil {
			p.byIndex[r.index] = r
			p.committed++
			p.unhold(r)
			p.inserted++
			if p.sorted != nil && (len(p.sorted) == 0 || p.sorted[len(p.sorted)-1].Index < r.index) {
				p.sorted = append(p.sorted, next) // the usual case: a new row above every other
			} else {
				p.sorted = nil
			}
		} else {
			p.sorted = nil
		}
		p.committedRow(old, next)
	}
	p.garbage = append(p.garbage, res.Superseded...)
	p.garbage = append(p.garbage, res.Stale...)
	p.bump()
	return res, nil
}

// knows reports whether some cell of u is one the partition knows
// unreferenced: a removed row's reservation (an orphan) or garbage not
// swept yet (an aborted reservation, a removed row's cell). A commit
// refused for a row that is not as its Prepare left it, none of whose
// cells the partition knows, names a reservation the log lost (a failover
// to a replica that never had the Prepare): its indexes may be another
// row's now. It scans the partition's garbage: it runs only on a refusal.
func (p *Partition) knows(u *metadata.RowUpdate) bool {
	for f, fi := range u.Fields {
		id := metadata.CellID{Index: u.Index, Field: f, Gen: fi.Gen}
		for _, o := range p.orphans {
			if o.id() == id {
				return true
			}
		}
		for _, g := range p.garbage {
			if g.ID() == id {
				return true
			}
		}
	}
	return false
}

// Lookup returns the committed row of each key (nil: unknown or not yet
// committed).
func (p *Partition) Lookup(keys []string) []*metadata.Row {
	out := make([]*metadata.Row, len(keys))
	for i, k := range keys {
		if r := p.rows[k]; r != nil {
			out[i] = r.view
		}
	}
	return out
}

// Row returns the committed row of index, or nil.
func (p *Partition) Row(index uint64) *metadata.Row {
	if r := p.byIndex[index]; r != nil {
		return r.view
	}
	return nil
}

// List returns the committed rows by index, shared: the caller must not
// modify the slice. It is kept until the next change of the rows.
// Since returns, for each of rows (committed rows of the partition, as
// List returns them), when it last gained a field (its first commit, or
// one adding a field it had not): when it may have become ready for a
// task, as a time of the log. A row not committed here is zero. It
// changes nothing.
func (p *Partition) Since(rows []*metadata.Row) []time.Time {
	out := make([]time.Time, len(rows))
	for i, mr := range rows {
		if r := p.byIndex[mr.Index]; r != nil && r.since != 0 {
			out[i] = time.UnixMicro(r.since)
		}
	}
	return out
}

func (p *Partition) List() []*metadata.Row {
	if p.sorted != nil {
		return p.sorted
	}
	out := make([]*metadata.Row, 0, p.committed)
	for _, r := range p.byIndex {
		out = append(out, r.view)
	}
	slices.SortFunc(out, func(a, b *metadata.Row) int { return compareIndex(a.Index, b.Index) })
	p.sorted = out
	return out
}

// Committed returns how many rows are committed.
func (p *Partition) Committed() int { return p.committed }

func compareIndex(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Delete removes keys (unknown ones are ignored) and returns the committed
// rows it removed. Their cells become garbage (committed ones at once,
// reservations once old enough: orphans), and they leave every task's
// consumption.
func (p *Partition) Delete(now int64, keys []string) []*metadata.Row {
	p.tick(now)
	defer p.roomMade(p.held, p.bytes)
	var out []*metadata.Row
	for _, k := range keys {
		r := p.rows[k]
		if r == nil {
			continue
		}
		if r.view != nil {
			out = append(out, r.view)
			p.removedRow(r)
			delete(p.byIndex, r.index)
			p.committed--
			p.sorted = nil
		}
		p.retire(r)
		p.release(r)
		delete(p.rows, k)
		*r = row{} // its block may live on: hold nothing
	}
	p.garbage = metadata.AppendRowRefs(p.growGarbage(out), out)
	p.deleted(out)
	if len(out) > 0 {
		p.bump()
	}
	return out
}

// DeletePartition removes every row and returns the committed ones, as
// Delete does; every task's consumption is forgotten.
func (p *Partition) DeletePartition(now int64) []*metadata.Row {
	p.tick(now)
	out := make([]*metadata.Row, 0, p.committed)
	for _, r := range p.byIndexAll() {
		if r.view != nil {
			out = append(out, r.view)
		}
		p.retire(r)
	}
	p.garbage = metadata.AppendRowRefs(p.growGarbage(out), out)
	p.rows = map[string]*row{}
	p.byIndex = map[uint64]*row{}
	p.committed = 0
	p.held, p.bytes = 0, 0
	p.sorted = nil
	p.tasks = map[string]*task{}
	p.byNumber = nil
	p.sum = nil
	p.bump()
	return out
}

// retire records the reservations of a row being removed as orphans.
func (p *Partition) retire(r *row) {
	for i := range r.gens {
		g := &r.gens[i]
		g.eachPending(func(gen uint64) {
			p.orphans = append(p.orphans, pendingRef{ref: metadata.Ref{Index: r.index, Field: g.field, Gen: gen}, at: g.when(gen)})
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

func (p *Partition) growGarbage(rows []*metadata.Row) []metadata.Ref {
	n := 0
	for _, r := range rows {
		n += len(r.Fields)
	}
	return slices.Grow(p.garbage, n)
}

// Abort aborts, at time now, the pending reservations made at or before
// cutoff (a time, microseconds): they become garbage, and a Commit naming
// them fails with ErrConflict. It scans the rows only when a reservation
// is pending.
func (p *Partition) Abort(now, cutoff int64) {
	p.tick(now)
	defer p.roomMade(p.held, p.bytes)
	if p.pending > 0 || p.held > 0 {
		for _, r := range p.byIndexAll() {
			lost := false
			for i := range r.gens {
				g := &r.gens[i]
				switch {
				case g.pend == 0:
				case g.at <= cutoff: // all of them
					lost = true
					g.eachPending(func(gen uint64) {
						p.garbage = append(p.garbage, metadata.Ref{Index: r.index, Field: g.field, Gen: gen})
					})
					p.pending -= bits.OnesCount64(g.pend)
					g.pend = 0
				case g.old <= cutoff: // the oldest
					lost = true
					gen := g.oldest()
					g.drop(gen)
					p.garbage = append(p.garbage, metadata.Ref{Index: r.index, Field: g.field, Gen: gen})
					p.pending--
				}
			}
			if lost || r.held && r.view == nil && r.since <= cutoff {
				// (A row a tag-only put prepared has no reservation to
				// lose: its age lets it go.)
				p.unhold(r)
			}
		}
		p.far = slices.DeleteFunc(p.far, func(o pendingRef) bool {
			if o.at > cutoff {
				return false
			}
			p.garbage = append(p.garbage, o.ref)
			p.pending--
			return true
		})
	}
	p.orphans = slices.DeleteFunc(p.orphans, func(o pendingRef) bool {
		if o.at > cutoff {
			return false
		}
		p.garbage = append(p.garbage, o.ref)
		return true
	})
}

// Garbage returns the garbage cells not yet reported swept, shared: the
// caller must not modify the slice.
func (p *Partition) Garbage() []metadata.Ref { return p.garbage }

// Swept forgets the cells refs name (deleted by the caller): garbage,
// orphans, and pending reservations (aborted: a put that rolled back
// reports its own cells this way). Refs that are one run of the garbage,
// as a commit's Superseded and Stale are, or the cells of the rows a
// Delete returned in metadata.AppendRowRefs order, cost their length.
func (p *Partition) Swept(now int64, refs []metadata.Ref) {
	p.tick(now)
	defer p.roomMade(p.held, p.bytes)
	if len(refs) == 0 {
		return
	}
	if !p.sweepRun(refs) {
		p.sweepSet(refs)
	}
}

func (p *Partition) sweepRun(refs []metadata.Ref) bool {
	n := len(refs)
	for i := len(p.garbage) - n; i >= 0; i-- {
		if !sameCell(p.garbage[i], refs[0]) {
			continue
		}
		for j := 1; j < n; j++ {
			if !sameCell(p.garbage[i+j], refs[j]) {
				return false
			}
		}
		p.garbage = slices.Delete(p.garbage, i, i+n)
		return true
	}
	return false
}

func (p *Partition) sweepSet(refs []metadata.Ref) {
	set := metadata.NewCellSet(refs)
	var inGarbage, inOrphans int
	p.garbage, inGarbage = metadata.DeleteCells(set, p.garbage, metadata.Ref.ID)
	p.orphans, inOrphans = metadata.DeleteCells(set, p.orphans, pendingRef.id)
	found := inGarbage + inOrphans
	if found >= len(set) || p.pending == 0 {
		return // a cell is in one place only: nothing left to find
	}
	for _, r := range p.rows {
		lost := false
		for i := range r.gens {
			g := &r.gens[i]
			g.eachPending(func(gen uint64) {
				if set.Has(metadata.CellID{Index: r.index, Gen: gen, Field: g.field}) {
					g.drop(gen)
					p.pending--
					lost = true
				}
			})
		}
		if lost {
			p.unhold(r)
		}
	}
	var inFar int
	p.far, inFar = metadata.DeleteCells(set, p.far, pendingRef.id)
	p.pending -= inFar
}

// Abandon makes the reservations refs name garbage (with the refs' Tags):
// pending ones of rows, and orphans. It returns how many refs name
// nothing it knows as pending (a reservation aborted and swept already,
// or lost with a log a failover rewound).
func (p *Partition) Abandon(now int64, refs []metadata.Ref) int {
	p.tick(now)
	defer p.roomMade(p.held, p.bytes)
	set := make(map[metadata.CellID]metadata.Ref, len(refs))
	for _, r := range refs {
		set[r.ID()] = r
	}
	found := 0
	take := func(id metadata.CellID) bool {
		r, ok := set[id]
		if ok {
			p.garbage = append(p.garbage, r)
			found++
			delete(set, id)
		}
		return ok
	}
	p.orphans = slices.DeleteFunc(p.orphans, func(o pendingRef) bool { return take(o.ref.ID()) })
	if p.pending > 0 {
		for _, r := range p.byIndexAll() {
			lost := false
			for i := range r.gens {
				g := &r.gens[i]
				g.eachPending(func(gen uint64) {
					if take(metadata.CellID{Index: r.index, Gen: gen, Field: g.field}) {
						g.drop(gen)
						p.pending--
						lost = true
					}
				})
			}
			if lost {
				p.unhold(r)
			}
		}
		p.far = slices.DeleteFunc(p.far, func(o pendingRef) bool {
			if take(o.ref.ID()) {
				p.pending--
				return true
			}
			return false
		})
	}
	// A ref already garbage is known too.
	for _, g := range p.garbage[:len(p.garbage)-found] {
		if _, ok := set[g.ID()]; ok {
			delete(set, g.ID())
		}
	}
	return len(set)
}

// byIndexAll returns every row, prepared ones too, by index: for the
// scans whose order shows in the garbage, so that every process applying
// a record orders it alike.
func (p *Partition) byIndexAll() []*row {
	out := make([]*row, 0, len(p.rows))
	for _, r := range p.rows {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b *row) int { return compareIndex(a.index, b.index) })
	return out
}

func sameCell(a, b metadata.Ref) bool {
	return a.Index == b.Index && a.Gen == b.Gen && a.Field == b.Field
}

func popcount(x uint64) int    { return bits.OnesCount64(x) }
func bitsLeading(x uint64) int { return bits.LeadingZeros64(x) }
