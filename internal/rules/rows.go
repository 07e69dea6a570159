package rules

import (
	"fmt"
	"math"
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
	// shared is set when gens is shared with other rows (see
	// genSharer): read-only, copied by own before a change. Only a
	// committed row with no reservation pending in a window shares.
	shared bool
	// since is when the row last gained a field (its first commit, or one
	// adding a field it had not): when it may have become ready for a
	// task, from which a group's deadline counts.
	since int64
}

type fieldGen struct {
	field string
	next  uint64
	// size is the bytes the capacity counts for the field: its newest
	// write's once that committed, the largest of its cell's and its
	// pending writes' while writes are pending (an upper bound when one
	// is given up); see capacity.go.
	size int64
	// w is where the field's pending reservations in the window are in
	// Partition.wins, plus one; 0 when it has none, as almost every field
	// has: kept apart so that a row pays for them only while a put of it
	// is in progress.
	w uint32
}

// pendWindow is a field's pending reservations in its window. Its
// fieldGen holds one exactly while pend is not 0: every change that
// clears pend's last bit frees it (Partition.freeWindow), as does the
// removal of its row (retire), and a reservation of a field with none
// takes a fresh one (Partition.newWindow).
type pendWindow struct {
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
	// nsize is the size of the newest write (generation next-1): its
	// field's size once it commits, which it can only while pending, so
	// it needs keeping only while the window is held (see capacity.go).
	nsize int64
	// row is the index of the row whose field it is: Abort finds the
	// rows with reservations pending through the windows in use.
	row uint64
}

// idleWindows bounds the room for windows a partition keeps once none
// is in use (Partition.wins), for its next puts: a put of 64 rows of 3
// fields takes 192. It is 36 bytes a window (at most 9 KiB a
// partition), and an Abort that leaves nothing pending lets it go.
const idleWindows = 256

// newWindow gives g, which has none, the window w.
func (p *Partition) newWindow(g *fieldGen, w pendWindow) {
	if n := len(p.freeWins); n > 0 {
		i := p.freeWins[n-1]
		p.freeWins = p.freeWins[:n-1]
		p.wins[i] = w
		g.w = i + 1
	} else {
		if len(p.wins) == math.MaxUint32 {
			panic("rules: 2³²-1 fields with reservations pending")
		}
		p.wins = append(p.wins, w)
		g.w = uint32(len(p.wins))
	}
	p.usedWins++
}

// freeWindow frees g's window, if it has one: it has nothing pending left
// in it, or its row is removed.
func (p *Partition) freeWindow(g *fieldGen) {
	if g.w == 0 {
		return
	}
	p.usedWins--
	switch {
	case p.usedWins > 0:
		p.wins[g.w-1] = pendWindow{} // a window not in use has nothing pending
		p.freeWins = append(p.freeWins, g.w-1)
	case cap(p.wins) > idleWindows: // none in use: start over, from nothing
		p.wins, p.freeWins = nil, nil
	default: // none in use: start over
		p.wins, p.freeWins = p.wins[:0], p.freeWins[:0]
	}
	g.w = 0
}

// win returns g's window; g must have one. It is valid until the next
// newWindow.
func (p *Partition) win(g *fieldGen) *pendWindow { return &p.wins[g.w-1] }

// window is how many of a field's newest generations pend tracks.
const window = 64

// pendingRef is a reservation kept apart from its fieldGen: a removed
// row's (an orphan), or one pushed out of the window.
type pendingRef struct {
	ref metadata.Ref
	at  int64
}

func (o pendingRef) id() metadata.CellID { return o.ref.ID() }

// pend returns g's pending generations in the window, as pendWindow.pend
// (0: none).
func (p *Partition) pend(g *fieldGen) uint64 {
	if g.w == 0 {
		return 0
	}
	return p.wins[g.w-1].pend
}

// has reports whether gen of g is pending in the window.
func (p *Partition) has(g *fieldGen, gen uint64) bool {
	return gen < g.next && g.next-1-gen < window && p.pend(g)>>(g.next-1-gen)&1 != 0
}

// drop clears gen from g's window and reports whether it was pending;
// the window is freed with the last.
func (p *Partition) drop(g *fieldGen, gen uint64) bool {
	if !p.has(g, gen) {
		return false
	}
	p.dropPending(g, gen)
	return true
}

// dropPending clears gen, pending in g's window, from it; the window is
// freed with the last.
func (p *Partition) dropPending(g *fieldGen, gen uint64) {
	w := p.win(g)
	if gen == oldest(g, w) {
		w.old = w.at // the next oldest was made at old or later
	}
	w.pend &^= 1 << (g.next - 1 - gen)
	if w.pend == 0 {
		p.freeWindow(g)
	}
}

// oldest returns the oldest generation pending in g's window w; there
// must be one.
func oldest(g *fieldGen, w *pendWindow) uint64 {
	return g.next - 1 - uint64(63-bits.LeadingZeros64(w.pend))
}

// when returns when pending gen of g is taken to have been reserved.
func (p *Partition) when(g *fieldGen, gen uint64) int64 {
	w := p.win(g)
	if gen == oldest(g, w) {
		return w.old
	}
	return w.at
}

// eachPending calls f with each generation of g pending in the window,
// newest first, as they were when it was called (f may drop them).
func (p *Partition) eachPending(g *fieldGen, f func(gen uint64)) {
	for m := p.pend(g); m != 0; m &= m - 1 {
		f(g.next - 1 - uint64(bits.TrailingZeros64(m)))
	}
}

// own gives r a copy of its gens of its own if it shares them, for a
// change.
func (r *row) own() {
	if r.shared {
		r.gens, r.shared = slices.Clone(r.gens), false
	}
}

// genSharer makes the rows it is shown in turn whose gens are equal, none
// pending in a window, share one copy of them (the rows of one put
// mostly are alike): a row costs its fields' state once per run of equal
// rows. A row's own gens are copied when a second row matches them, so
// that the block they were allocated in is not kept alive.
type genSharer struct {
	gens  []fieldGen // the last row's
	first *row       // the row whose own gens are gens, nil once shared
}

// share shares r's gens with the row before's if equal. r is committed.
func (s *genSharer) share(r *row) {
	if r.shared {
		s.gens, s.first = r.gens, nil
		return
	}
	for i := range r.gens {
		if r.gens[i].w != 0 {
			s.gens, s.first = nil, nil
			return
		}
	}
	if s.gens == nil || !slices.Equal(r.gens, s.gens) {
		s.gens, s.first = r.gens, r
		return
	}
	if s.first != nil {
		s.gens = slices.Clip(slices.Clone(s.gens))
		s.first.gens, s.first.shared = s.gens, true
		s.first = nil
	}
	r.gens, r.shared = s.gens, true
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
// time at, a write of size bytes (the field's nsize), and the field's
// generations (in r.gens: valid until the row gains a field).
func (r *row) reserve(p *Partition, field string, hint int, at, size int64) (uint64, *fieldGen) {
	r.own()
	i := r.find(field, hint)
	if i < 0 {
		i = len(r.gens)
		r.gens = append(r.gens, fieldGen{field: field})
	}
	g := &r.gens[i]
	gen := g.next
	g.next++
	if g.w == 0 { // none pending
		p.newWindow(g, pendWindow{pend: 1, at: at, old: at, nsize: size, row: r.index})
		return gen, g
	}
	w := p.win(g)
	if w.pend>>(window-1) != 0 { // the oldest leaves the window
		p.far = append(p.far, pendingRef{ref: metadata.Ref{Index: r.index, Field: field, Gen: gen - window}, at: w.old})
		w.old = w.at
	}
	w.pend = w.pend<<1 | 1
	w.at = at
	w.nsize = size
	return gen, g
}

// unpend removes gen from field's reservations, committing it, and
// reports whether it was one: the field's newest write (pending in the
// window) becomes what its size counts. It returns field's place in
// r.gens (hint if it has none).
func (r *row) unpend(p *Partition, field string, gen uint64, hint int) (int, bool) {
	i := r.find(field, hint)
	if i < 0 {
		return hint, false
	}
	if g := &r.gens[i]; p.has(g, gen) {
		if gen == g.next-1 {
			p.sized(g, p.win(g).nsize) // its newest write is its cell now (read before dropPending frees the window)
		}
		p.dropPending(g, gen)
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
	if p.has(&r.gens[i], gen) || p.farIndex(r.index, field, gen) >= 0 {
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
		isNew := r == nil
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
			p.prepared(r)
		}
		for j, f := range fields {
			var size int64
			if sizes != nil {
				size = sizes[j*len(keys)+i]
			}
			var g *fieldGen
			cur[j], g = r.reserve(p, f, j, p.now, size)
			p.sized(g, max(g.size, size))
		}
		if prevMap == nil || !slices.Equal(cur, prev) {
			prevMap = make(map[string]uint64, nf)
			for j, f := range fields {
				prevMap[f] = cur[j]
			}
			cur, prev = prev, cur
		}
		out[i] = metadata.Reservation{Index: r.index, Gens: prevMap, New: isNew}
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
		gens  genSharer
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
			}
		}
		if len(block) == 0 {
			block = make([]metadata.Row, min(len(rows)-i, blockRows))
		}
		next := &block[0]
		block = block[1:]
		old, since := r.view, r.since
		merge.Merge(next, old, u, &res)
		if old != nil {
			next.Key = old.Key // the copy the rows are keyed by
		}
		r.view = next
		if old == nil || len(next.Fields) > len(old.Fields) {
			r.since = p.now // it gained a field: it may be ready for more tasks
		}
		gens.share(r)
		p.committedSummary(r, old, since)
		if old == nil {
			// Keyed by the view's copy of the key (a map assignment
			// stores the key it is given): the row holds its key once.
			p.rows[next.Key] = r
			delete(p.uncommitted, r.index)
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
		} else {
			delete(p.uncommitted, r.index)
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
	p.uncommitted = nil
	p.committed = 0
	p.held, p.bytes = 0, 0
	p.sorted = nil
	p.wins, p.freeWins, p.usedWins = nil, nil, 0 // retire freed them
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
		p.eachPending(g, func(gen uint64) {
			p.orphans = append(p.orphans, pendingRef{ref: metadata.Ref{Index: r.index, Field: g.field, Gen: gen}, at: p.when(g, gen)})
		})
		p.pending -= bits.OnesCount64(p.pend(g))
		p.freeWindow(g)
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
// is pending. It also ends the blocks no PutNew took an index of since
// cutoff (see Block): the cells of their indexes nothing took become
// garbage.
func (p *Partition) Abort(now, cutoff int64) {
	p.tick(now)
	defer p.roomMade(p.held, p.bytes)
	if p.pending > 0 || p.held > 0 {
		for _, r := range p.pendingRows() {
			lost := false
			for i := range r.gens {
				g := &r.gens[i]
				if g.w == 0 {
					continue // none pending
				}
				switch w := p.win(g); {
				case w.at <= cutoff: // all of them
					lost = true
					p.eachPending(g, func(gen uint64) {
						p.garbage = append(p.garbage, metadata.Ref{Index: r.index, Field: g.field, Gen: gen})
					})
					p.pending -= bits.OnesCount64(w.pend)
					p.freeWindow(g)
				case w.old <= cutoff: // the oldest
					lost = true
					gen := oldest(g, w)
					p.dropPending(g, gen)
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
	p.abortBlocks(cutoff)
	if p.usedWins == 0 {
		p.wins, p.freeWins = nil, nil // idle: its room for windows goes (see idleWindows)
	}
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
			p.eachPending(g, func(gen uint64) {
				if set.Has(metadata.CellID{Index: r.index, Gen: gen, Field: g.field}) {
					p.drop(g, gen)
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
				p.eachPending(g, func(gen uint64) {
					if take(metadata.CellID{Index: r.index, Gen: gen, Field: g.field}) {
						p.drop(g, gen)
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
// pendingRows returns, by index, the rows that hold room of the capacity
// or have a reservation pending in a window: those Abort may change. It
// finds them through the windows in use and the rows never committed,
// not by passing over the rows.
func (p *Partition) pendingRows() []*row {
	var out []*row
	for i := range p.wins {
		if w := &p.wins[i]; w.pend != 0 {
			r := p.byIndex[w.row]
			if r == nil {
				r = p.uncommitted[w.row]
			}
			out = append(out, r)
		}
	}
	for _, r := range p.uncommitted {
		if r.held {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b *row) int { return compareIndex(a.index, b.index) })
	return slices.Compact(out)
}

// prepared records r, a row a Prepare made, as not committed yet.
func (p *Partition) prepared(r *row) {
	if p.uncommitted == nil {
		p.uncommitted = map[uint64]*row{}
	}
	p.uncommitted[r.index] = r
}

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
