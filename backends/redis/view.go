package redis

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/tinylib/msgp/msgp"

	"github.com/tqgo/tqgo/backends"
)

// view is one client's copy of a partition's state, rebuilt from the
// partition's log: the state after the first n records of the log whose
// epoch is epoch, and whose head (the chain of their ids, see chainHead)
// is head. Replaying a record is deterministic, so every client that has
// applied the same records holds the same state, and a write computed
// against a view is valid exactly when the log still has that epoch,
// length and head (the append script checks that atomically).
//
// The rules are backends/memory's: rows map keys to indexes and the next
// generation of each field; a row is visible once committed; a field
// commits only under a pending reservation (or as its committed
// generation again); and every cell handed out is remembered until it is
// reported swept (see backends.MetaStore): reservations with the server's
// time they were made, garbage cells in the order they died, and the
// reservations of removed rows (orphans).
type view struct {
	mu    sync.Mutex // guards everything below
	epoch string     // "" no log (a fresh partition); badEpoch: unknown
	n     int64
	head  string // the chain of the ids of the n records
	rows  map[string]*metaRow
	// era counts resets: a write installs its change only if the view is
	// where the write computed it, same era (the same row objects) and n.
	era   uint64
	stamp uint64 // counts commit computations (see metaRow.stamp)
	used  uint64 // when Meta last handed the view out, for eviction

	pending int            // reservations of rows, so aborts skip the scan when 0
	garbage []backends.Ref // cells nothing references, not yet swept, oldest first
	orphans []pendingRef   // reservations of removed rows

	// passed holds the view's last positions, by length modulo
	// passedLen, so that catchUp can tell a reply the view has since
	// moved past from one of another log.
	passed [passedLen]position
}

// pendingGen is one reservation: its generation and the server's time
// (microseconds since the Unix epoch) when the Prepare that made it ran.
type pendingGen struct {
	gen uint64
	at  int64
}

// pendingRef is a removed row's reservation.
type pendingRef struct {
	ref backends.Ref
	at  int64
}

// id is the cell the reservation names.
func (o pendingRef) id() backends.CellID { return o.ref.ID() }

// empty reports whether the view holds nothing worth a log.
func (v *view) empty() bool {
	return len(v.rows) == 0 && len(v.garbage) == 0 && len(v.orphans) == 0
}

// position is where a view stood: the log's epoch, length and head.
type position struct {
	epoch string
	n     int64
	head  string
}

// passedLen is how many of its last positions a view remembers.
const passedLen = 8

// pass records the view's position as one it passed.
func (v *view) pass() {
	v.passed[v.n%passedLen] = position{v.epoch, v.n, v.head}
}

// headAt returns the head the view had at length n of the log of epoch,
// if it remembers it.
func (v *view) headAt(epoch string, n int64) (string, bool) {
	p := v.passed[n%passedLen]
	return p.head, p.epoch == epoch && p.n == n
}

// badEpoch marks a view that must be read again from the start: no log
// has it (epochs are base-36 digits).
const badEpoch = "?"

type metaRow struct {
	index uint64
	row   *backends.Row // the committed row, immutable; nil until committed
	gens  []fieldGen    // the next generation to reserve, per field
	// stamp and pend carry a row's merge from one update of a commit to
	// the next update of the same key in that commit.
	stamp uint64
	pend  *backends.Row
}

type fieldGen struct {
	field string
	next  uint64
	pend  []pendingGen // reservations not yet committed or aborted, oldest first
}

func newView() *view { return &view{rows: map[string]*metaRow{}} }

// reset empties the view: epoch "" and no records is a partition with no
// log; badEpoch makes the next read fetch the whole log.
func (v *view) reset(epoch string) {
	v.epoch, v.n, v.head, v.rows = epoch, 0, "", map[string]*metaRow{}
	v.pending, v.garbage, v.orphans = 0, nil, nil
	v.passed = [passedLen]position{}
	v.era++
}

// gen is the generation of field the row reserves next; hint is where
// field likely sits in r.gens.
func (r *metaRow) gen(field string, hint int) (uint64, int) {
	i := hint
	if i >= len(r.gens) || r.gens[i].field != field {
		if i = slices.IndexFunc(r.gens, func(g fieldGen) bool { return g.field == field }); i < 0 {
			return 0, -1
		}
	}
	return r.gens[i].next, i
}

// blockRows is how many rows (metaRows, committed Rows) a view allocates at
// once: one allocation per block rather than per row.
const blockRows = 64

// prepared is what a Prepare computed against a view: the reservations
// (new rows' indexes still to be added to the base the script draws), the
// existing row of each key (nil: new) and the new keys' positions.
type prepared struct {
	res    []backends.Reservation
	rows   []*metaRow
	newPos []int
}

// prepare computes a Prepare of keys (distinct) and fields without
// changing the view.
func (v *view) prepare(keys, fields []string) *prepared {
	p := &prepared{res: make([]backends.Reservation, len(keys)), rows: make([]*metaRow, len(keys))}
	nf := len(fields)
	var zeros map[string]uint64 // every new row reserves generation 0
	cur, prev := make([]uint64, nf), make([]uint64, nf)
	var prevMap map[string]uint64
	for i, k := range keys {
		r := v.rows[k]
		if r == nil {
			if zeros == nil {
				zeros = make(map[string]uint64, nf)
				for _, f := range fields {
					zeros[f] = 0
				}
			}
			p.newPos = append(p.newPos, i)
			p.res[i].Gens = zeros
			continue
		}
		p.rows[i] = r
		for j, f := range fields {
			cur[j], _ = r.gen(f, j)
		}
		if prevMap == nil || !slices.Equal(cur, prev) {
			prevMap = make(map[string]uint64, nf)
			for j, f := range fields {
				prevMap[f] = cur[j]
			}
			cur, prev = prev, cur
		}
		p.res[i] = backends.Reservation{Index: r.index, Gens: prevMap}
	}
	return p
}

// setBase gives the new rows their indexes.
func (p *prepared) setBase(base uint64) {
	for j, i := range p.newPos {
		p.res[i].Index = base + uint64(j)
	}
}

// installPrepare applies p, computed against the view as it is, with the
// new rows' indexes from base, its reservations made at server time at.
func (v *view) installPrepare(p *prepared, keys, fields []string, base uint64, at int64) {
	if len(p.newPos) > len(v.rows) {
		// Sized up front: growing a map of many new rows rehashes it
		// several times (measured: most of a 1024-row Prepare's CPU).
		rows := make(map[string]*metaRow, len(v.rows)+len(p.newPos))
		maps.Copy(rows, v.rows)
		v.rows = rows
	}
	nf := len(fields)
	v.pending += len(keys) * nf
	var block []metaRow
	var gens []fieldGen
	var slots []pendingGen // one reservation each, so rows of one Prepare share blocks
	for j, i := range p.newPos {
		if len(block) == 0 {
			block = make([]metaRow, min(len(p.newPos)-j, blockRows))
			gens = make([]fieldGen, nf*len(block))
			slots = make([]pendingGen, nf*len(block))
		}
		r := &block[0]
		block = block[1:]
		// Capped at nf: a later new field reallocates rather than spill
		// into the next row's share.
		r.index, r.gens, gens = base+uint64(j), gens[:nf:nf], gens[nf:]
		for g, f := range fields {
			slots[0] = pendingGen{gen: 0, at: at}
			r.gens[g] = fieldGen{field: f, next: 1, pend: slots[:1:1]}
			slots = slots[1:]
		}
		v.rows[keys[i]] = r
	}
	for _, r := range p.rows {
		if r == nil {
			continue
		}
		for j, f := range fields {
			if _, i := r.gen(f, j); i >= 0 {
				g := &r.gens[i]
				g.pend = append(g.pend, pendingGen{gen: g.next, at: at})
				g.next++
			} else {
				r.gens = append(r.gens, fieldGen{field: f, next: 1, pend: []pendingGen{{gen: 0, at: at}}})
			}
		}
	}
}

// live reports whether field may commit at gen in r: a pending
// reservation, or the generation already committed.
func (r *metaRow) live(field string, gen uint64, hint int) bool {
	if _, i := r.gen(field, hint); i >= 0 {
		for _, pg := range r.gens[i].pend {
			if pg.gen == gen {
				return true
			}
		}
	}
	if r.row != nil {
		fi, ok := r.row.Fields[field]
		return ok && fi.Gen == gen
	}
	return false
}

// unpend removes gen from field's reservations and reports whether it was
// one.
func (r *metaRow) unpend(field string, gen uint64, hint int) bool {
	_, i := r.gen(field, hint)
	if i < 0 {
		return false
	}
	pend := r.gens[i].pend
	for j := range pend {
		if pend[j].gen == gen {
			r.gens[i].pend = slices.Delete(pend, j, j+1)
			return true
		}
	}
	return false
}

// committing is what a Commit computed against a view: the rows and their
// next states, the cells no longer referenced, and the change in the
// number of committed rows.
type committing struct {
	rows    []*metaRow
	next    []*backends.Row
	updates []backends.RowUpdate
	res     backends.CommitResult
	fresh   int64
}

// commit computes a Commit of updates without changing the view (but for
// the rows' scratch stamps). A row that is gone or has another index is a
// conflict.
func (v *view) commit(partition string, updates []backends.RowUpdate) (*committing, error) {
	c := &committing{rows: make([]*metaRow, len(updates)), next: make([]*backends.Row, len(updates)), updates: updates}
	var cells backends.UpdateCells
	for i := range updates {
		u := &updates[i]
		r := v.rows[u.Key]
		if r == nil || r.index != u.Index {
			if !v.retired(u.Index) {
				return nil, fmt.Errorf("%w: key %q index %d in partition %q", backends.ErrReservationLost, u.Key, u.Index, partition)
			}
			return nil, fmt.Errorf("%w: key %q in partition %q", backends.ErrConflict, u.Key, partition)
		}
		for j, cell := range cells.Of(u.Fields) {
			if !r.live(cell.Field, cell.Gen, j) {
				if next, _ := r.gen(cell.Field, j); cell.Gen >= next {
					return nil, fmt.Errorf("%w: key %q field %q in partition %q: generation %d was never reserved here",
						backends.ErrReservationLost, u.Key, cell.Field, partition, cell.Gen)
				}
				return nil, fmt.Errorf("%w: key %q field %q in partition %q: generation %d is not reserved (aborted?)",
					backends.ErrConflict, u.Key, cell.Field, partition, cell.Gen)
			}
		}
		c.rows[i] = r
	}
	v.stamp++
	var (
		merge backends.Merger
		block []backends.Row
	)
	for i, r := range c.rows {
		if len(block) == 0 {
			block = make([]backends.Row, min(len(c.rows)-i, blockRows))
		}
		next := &block[0]
		block = block[1:]
		cur := r.row
		if r.stamp == v.stamp {
			cur = r.pend // an earlier update of this commit
		} else if cur == nil {
			c.fresh++
		}
		merge.Merge(next, cur, &updates[i], &c.res)
		r.stamp, r.pend = v.stamp, next
		c.next[i] = next
	}
	return c, nil
}

// retired reports whether the view knows index as a row it removed (its
// cells garbage, its reservations orphans): a commit of that row then
// conflicts, and its cells are the committer's to delete. An index the
// view does not know at all was never reserved in this log.
func (v *view) retired(index uint64) bool {
	for _, o := range v.orphans {
		if o.ref.Index == index {
			return true
		}
	}
	for _, g := range v.garbage {
		if g.Index == index {
			return true
		}
	}
	return false
}

// installCommit applies c, computed against the view as it is: the
// committed generations are no longer pending, and the cells the commit
// left unreferenced are garbage.
func (v *view) installCommit(c *committing) {
	var cells backends.UpdateCells
	for i, r := range c.rows {
		r.row, r.pend = c.next[i], nil
		for j, cell := range cells.Of(c.updates[i].Fields) {
			if r.unpend(cell.Field, cell.Gen, j) {
				v.pending--
			}
		}
	}
	v.garbage = append(v.garbage, c.res.Superseded...)
	v.garbage = append(v.garbage, c.res.Stale...)
}

// deleting is what a Delete computed: the committed rows it removes.
type deleting struct {
	keys []string // present in the view
	rows []*backends.Row
}

func (v *view) delete(keys []string) *deleting {
	d := &deleting{}
	var seen map[string]bool // a key given twice is one row
	for _, k := range keys {
		if r := v.rows[k]; r != nil && !seen[k] {
			if seen == nil {
				seen = make(map[string]bool, len(keys))
			}
			seen[k] = true
			d.keys = append(d.keys, k)
			if r.row != nil {
				d.rows = append(d.rows, r.row)
			}
		}
	}
	return d
}

// installDelete applies d: the removed rows' committed cells are garbage
// and their reservations orphans.
func (v *view) installDelete(d *deleting) {
	for _, k := range d.keys {
		v.retire(v.rows[k])
		delete(v.rows, k)
	}
}

// emptyAfter reports whether the view would be empty once d is applied.
func (v *view) emptyAfter(d *deleting) bool {
	if len(d.keys) != len(v.rows) || len(d.rows) > 0 || len(v.garbage) > 0 || len(v.orphans) > 0 {
		return false
	}
	for _, k := range d.keys {
		for _, g := range v.rows[k].gens {
			if len(g.pend) > 0 {
				return false
			}
		}
	}
	return true
}

// clear removes every row, as installDelete does.
func (v *view) clear() {
	for _, r := range v.rows {
		v.retire(r)
	}
	v.rows = map[string]*metaRow{}
}

// retire makes a removed row's cells garbage and its reservations orphans.
func (v *view) retire(r *metaRow) {
	if r.row != nil {
		for f, fi := range r.row.Fields {
			v.garbage = append(v.garbage, backends.Ref{Index: r.index, Field: f, Gen: fi.Gen, Tag: fi.BackendTag})
		}
	}
	for _, g := range r.gens {
		for _, pg := range g.pend {
			v.orphans = append(v.orphans, pendingRef{ref: backends.Ref{Index: r.index, Field: g.field, Gen: pg.gen}, at: pg.at})
		}
		v.pending -= len(g.pend)
	}
}

// abort makes every reservation made at or before cutoff (server time,
// microseconds) garbage: pending ones of rows (their commits then
// conflict) and orphans.
func (v *view) abort(cutoff int64) {
	if v.pending > 0 {
		for _, r := range v.rows {
			for i := range r.gens {
				g := &r.gens[i]
				g.pend = slices.DeleteFunc(g.pend, func(pg pendingGen) bool {
					if pg.at > cutoff {
						return false
					}
					v.garbage = append(v.garbage, backends.Ref{Index: r.index, Field: g.field, Gen: pg.gen})
					v.pending--
					return true
				})
			}
		}
	}
	v.orphans = slices.DeleteFunc(v.orphans, func(o pendingRef) bool {
		if o.at > cutoff {
			return false
		}
		v.garbage = append(v.garbage, o.ref)
		return true
	})
}

// sweep forgets the cells refs name: garbage, orphans, and pending
// reservations (which it aborts: a rolled-back put reports its own).
func (v *view) sweep(refs []backends.Ref) {
	if len(refs) == 0 {
		return
	}
	set := backends.NewCellSet(refs)
	var inGarbage, inOrphans int
	v.garbage, inGarbage = backends.DeleteCells(set, v.garbage, backends.Ref.ID)
	v.orphans, inOrphans = backends.DeleteCells(set, v.orphans, pendingRef.id)
	found := inGarbage + inOrphans
	if found >= len(set) || v.pending == 0 {
		return // a cell is in one place only: nothing left to find
	}
	for _, r := range v.rows {
		for i := range r.gens {
			g := &r.gens[i]
			g.pend = slices.DeleteFunc(g.pend, func(pg pendingGen) bool {
				ok := set.Has(backends.CellID{Index: r.index, Gen: pg.gen, Field: g.field})
				if ok {
					v.pending--
				}
				return ok
			})
		}
	}
}

// abandon makes the reservations refs name garbage (with the refs'
// tags): pending ones of rows, and orphans. It returns how many cells of
// refs the view knows (garbage already included).
func (v *view) abandon(refs []backends.Ref) int {
	set := make(map[backends.CellID]backends.Ref, len(refs))
	for _, r := range refs {
		set[r.ID()] = r
	}
	known := 0
	for _, g := range v.garbage {
		if _, ok := set[g.ID()]; ok {
			known++
		}
	}
	take := func(id backends.CellID) bool {
		r, ok := set[id]
		if ok {
			v.garbage = append(v.garbage, r)
			known++
		}
		return ok
	}
	v.orphans = slices.DeleteFunc(v.orphans, func(o pendingRef) bool { return take(o.ref.ID()) })
	if v.pending > 0 {
		for _, r := range v.rows {
			for i := range r.gens {
				g := &r.gens[i]
				g.pend = slices.DeleteFunc(g.pend, func(pg pendingGen) bool {
					if take(backends.CellID{Index: r.index, Gen: pg.gen, Field: g.field}) {
						v.pending--
						return true
					}
					return false
				})
			}
		}
	}
	return known
}

// knownCells counts the cells of refs the view knows: garbage, orphans
// and pending reservations (it changes nothing).
func (v *view) knownCells(refs []backends.Ref) int {
	set := backends.NewCellSet(refs)
	known := 0
	for _, g := range v.garbage {
		if set.Has(g.ID()) {
			known++
		}
	}
	for _, o := range v.orphans {
		if set.Has(o.ref.ID()) {
			known++
		}
	}
	for _, r := range v.rows {
		for _, g := range r.gens {
			for _, pg := range g.pend {
				if set.Has(backends.CellID{Index: r.index, Gen: pg.gen, Field: g.field}) {
					known++
				}
			}
		}
	}
	return known
}

// emptyAfterSweep reports whether the view would be empty once refs are
// swept (it changes nothing).
func (v *view) emptyAfterSweep(refs []backends.Ref) bool {
	if len(v.rows) > 0 || len(v.garbage)+len(v.orphans) > len(refs) {
		return false
	}
	set := backends.NewCellSet(refs)
	for _, r := range v.garbage {
		if !set.Has(r.ID()) {
			return false
		}
	}
	for _, o := range v.orphans {
		if !set.Has(o.ref.ID()) {
			return false
		}
	}
	return true
}

// committedRows returns the committed row of each key (nil: unknown or
// not committed).
func (v *view) committedRows(keys []string) []*backends.Row {
	out := make([]*backends.Row, len(keys))
	for i, k := range keys {
		if r := v.rows[k]; r != nil {
			out[i] = r.row
		}
	}
	return out
}

// committed returns the view's committed rows by index.
func (v *view) committed() []*backends.Row {
	out := make([]*backends.Row, 0, len(v.rows))
	for _, r := range v.rows {
		if r.row != nil {
			out = append(out, r.row)
		}
	}
	slices.SortFunc(out, func(a, b *backends.Row) int { return cmp.Compare(a.Index, b.Index) })
	return out
}

// catchUp applies records recs, which the log of epoch holds from
// position from on and whose head is head, to a view that was in era and
// held asked records when the records were asked for. A view of the same
// log takes what it lacks (another goroutine may have moved it past the
// reply already: a reply no shorter than the view was when asked, which
// the view has since passed, holds nothing it lacks); a view
// still in era takes a whole log (from 0) in place of its own. Otherwise
// the view moved to another log since (a compaction, a delete, a reset)
// and moved is true: the reply cannot tell which is newer, so the caller
// asks again.
//
// The records must chain from the view's head to the log's: if they do
// not, the log is not the one the view replayed (a replica promoted
// before it had the view's last records, a log truncated or rewritten
// with its epoch kept), and the view is reset to be read again in full
// (moved is true). A record that does not decode, or a whole log whose
// records do not chain to its head, leaves the view to be read again in
// full and is an error.
func (v *view) catchUp(era uint64, asked int64, epoch string, from int64, head string, recs []string) (moved bool, _ error) {
	switch {
	case epoch == v.epoch && from <= v.n:
		// The same epoch: the view should hold the log's first v.n records.
	case from == 0 && v.era == era:
		v.reset(epoch)
	default:
		return true, nil
	}
	skip := v.n - from
	if end := from + int64(len(recs)); skip > int64(len(recs)) && v.era == era && end >= asked {
		// The view moved past the reply since it was asked for (this
		// client's own writes, or another read's catch-up): if it passed
		// the log's head, the reply holds nothing it lacks. A log
		// shorter than the view was when asked is another matter.
		if h, ok := v.headAt(epoch, end); ok && h == head {
			return false, nil
		}
	}
	h := v.head
	if skip <= int64(len(recs)) {
		for _, rec := range recs[skip:] {
			id, ok := recordID(rec)
			if !ok {
				v.reset(badEpoch)
				return false, fmt.Errorf("%w: record %d of the partition's log has no id", ErrCorrupt, v.n)
			}
			h = chainHead(h, id)
		}
	}
	if skip > int64(len(recs)) || h != head {
		whole := v.n == 0 && from == 0
		v.reset(badEpoch)
		if whole {
			return false, fmt.Errorf("%w: the partition's log does not chain to its head", ErrCorrupt)
		}
		return true, nil // not the log the view replayed: read it all again
	}
	for _, rec := range recs[skip:] {
		if err := v.apply(rec); err != nil {
			v.reset(badEpoch)
			return false, fmt.Errorf("%w: record %d of the partition's log: %v", ErrCorrupt, v.n, err)
		}
		v.n++
	}
	v.head = head
	v.pass()
	return false, nil
}

// apply replays one record.
func (v *view) apply(rec string) error {
	if len(rec) < bodyAt {
		return fmt.Errorf("record of %d bytes", len(rec))
	}
	b := unsafeBytes(rec)
	switch rec[0] {
	case recFence:
		if len(rec) != bodyAt {
			return fmt.Errorf("fence of %d bytes", len(rec))
		}
	case recPrepare:
		base, at, keys, fields, err := readPrepare(b)
		if err != nil {
			return err
		}
		v.installPrepare(v.prepare(keys, fields), keys, fields, base, at)
	case recCommit:
		updates, err := readCommit(b)
		if err != nil {
			return err
		}
		// A conflicting commit is never appended; if one were, every
		// client skips it alike.
		if c, err := v.commit("", updates); err == nil {
			v.installCommit(c)
		}
	case recDelete:
		keys, err := readDelete(b)
		if err != nil {
			return err
		}
		v.installDelete(v.delete(keys))
	case recClear:
		if len(rec) != bodyAt {
			return fmt.Errorf("clear record of %d bytes", len(rec))
		}
		v.clear()
	case recAbort:
		cutoff, err := readStamp(b)
		if err != nil {
			return err
		}
		v.abort(cutoff)
	case recSwept:
		refs, err := readSwept(b)
		if err != nil {
			return err
		}
		v.sweep(refs)
	case recAbandon:
		refs, err := readAbandon(b)
		if err != nil {
			return err
		}
		v.abandon(refs)
	case recSnapshot:
		if v.n != 0 {
			return fmt.Errorf("snapshot at position %d", v.n)
		}
		return v.readSnapshot(b)
	default:
		return fmt.Errorf("record kind %q", rec[0])
	}
	return nil
}

// snapshot encodes the whole view as one record.
func (v *view) snapshot() ([]byte, error) {
	var t tableWriter
	rows := msgp.AppendArrayHeader(nil, uint32(len(v.rows)))
	for k, r := range v.rows {
		rows = msgp.AppendString(rows, k)
		rows = msgp.AppendUint64(rows, r.index)
		rows = msgp.AppendArrayHeader(rows, uint32(3*len(r.gens)))
		for _, g := range r.gens {
			rows = msgp.AppendString(rows, g.field)
			rows = msgp.AppendUint64(rows, g.next)
			rows = msgp.AppendArrayHeader(rows, uint32(2*len(g.pend)))
			for _, pg := range g.pend {
				rows = msgp.AppendUint64(rows, pg.gen)
				rows = msgp.AppendInt64(rows, pg.at)
			}
		}
		rows = msgp.AppendBool(rows, r.row != nil)
		var fields map[string]backends.FieldInfo
		var tag map[string]any
		if r.row != nil {
			fields, tag = r.row.Fields, r.row.Tag
		}
		rows = msgp.AppendUint64(rows, t.ref(fields))
		var err error
		if rows, err = appendTag(rows, tag); err != nil {
			return nil, err
		}
	}
	rows = msgp.AppendArrayHeader(rows, uint32(len(v.garbage)))
	for _, r := range v.garbage {
		rows = msgp.AppendArrayHeader(rows, 4)
		rows = msgp.AppendUint64(rows, r.Index)
		rows = msgp.AppendString(rows, r.Field)
		rows = msgp.AppendUint64(rows, r.Gen)
		rows = msgp.AppendString(rows, r.Tag)
	}
	rows = msgp.AppendArrayHeader(rows, uint32(len(v.orphans)))
	for _, o := range v.orphans {
		rows = msgp.AppendArrayHeader(rows, 4)
		rows = msgp.AppendUint64(rows, o.ref.Index)
		rows = msgp.AppendString(rows, o.ref.Field)
		rows = msgp.AppendUint64(rows, o.ref.Gen)
		rows = msgp.AppendInt64(rows, o.at)
	}
	return t.record(recSnapshot, rows), nil
}

func (v *view) readSnapshot(b []byte) error {
	tables, b, err := readTables(b[bodyAt:])
	if err != nil {
		return err
	}
	n, b, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil {
		return err
	}
	if uint64(len(b)) < uint64(n)*6 {
		return msgp.ErrShortBytes
	}
	v.rows = make(map[string]*metaRow, n)
	block := make([]metaRow, n)
	for i := range block {
		r := &block[i]
		var k string
		if k, b, err = msgp.ReadStringBytes(b); err != nil {
			return err
		}
		if r.index, b, err = msgp.ReadUint64Bytes(b); err != nil {
			return err
		}
		var ng uint32
		if ng, b, err = msgp.ReadArrayHeaderBytes(b); err != nil {
			return err
		}
		if ng%3 != 0 || uint32(len(b)) < ng {
			return fmt.Errorf("row %q: %d generation values", k, ng)
		}
		r.gens = make([]fieldGen, ng/3)
		for j := range r.gens {
			g := &r.gens[j]
			if g.field, b, err = msgp.ReadStringBytes(b); err != nil {
				return err
			}
			if g.next, b, err = msgp.ReadUint64Bytes(b); err != nil {
				return err
			}
			var np uint32
			if np, b, err = msgp.ReadArrayHeaderBytes(b); err != nil {
				return err
			}
			if np%2 != 0 || uint32(len(b)) < np {
				return fmt.Errorf("row %q field %q: %d reservation values", k, g.field, np)
			}
			if np > 0 {
				g.pend = make([]pendingGen, np/2)
			}
			for q := range g.pend {
				if g.pend[q].gen, b, err = msgp.ReadUint64Bytes(b); err != nil {
					return err
				}
				if g.pend[q].at, b, err = msgp.ReadInt64Bytes(b); err != nil {
					return err
				}
			}
			v.pending += len(g.pend)
		}
		var committed bool
		if committed, b, err = msgp.ReadBoolBytes(b); err != nil {
			return err
		}
		var fields map[string]backends.FieldInfo
		var tag map[string]any
		if fields, b, err = readTableRef(b, tables); err != nil {
			return err
		}
		if tag, b, err = decodeTag(b); err != nil {
			return err
		}
		if committed {
			if fields == nil {
				fields = map[string]backends.FieldInfo{}
			}
			r.row = &backends.Row{Key: k, Index: r.index, Fields: fields, Tag: tag}
		}
		v.rows[k] = r
	}
	var err2 error
	if v.garbage, b, err2 = readCells(b); err2 != nil {
		return err2
	}
	var orphans []backends.Ref
	var ats []int64
	if orphans, b, err2 = readCellsAt(b, &ats); err2 != nil {
		return err2
	}
	for i, o := range orphans {
		v.orphans = append(v.orphans, pendingRef{ref: o, at: ats[i]})
	}
	if len(b) != 0 {
		return fmt.Errorf("%d trailing bytes", len(b))
	}
	return nil
}

// readCells reads a snapshot's garbage: [[index field gen tag]...].
func readCells(b []byte) ([]backends.Ref, []byte, error) {
	return readCellList(b, func(b []byte, r *backends.Ref) ([]byte, error) {
		var err error
		r.Tag, b, err = msgp.ReadStringBytes(b)
		return b, err
	})
}

// readCellsAt reads a snapshot's orphans: [[index field gen at]...], the
// times into *ats.
func readCellsAt(b []byte, ats *[]int64) ([]backends.Ref, []byte, error) {
	return readCellList(b, func(b []byte, _ *backends.Ref) ([]byte, error) {
		at, b, err := msgp.ReadInt64Bytes(b)
		*ats = append(*ats, at)
		return b, err
	})
}

// readCellList reads [[index field gen x]...], x by last.
func readCellList(b []byte, last func([]byte, *backends.Ref) ([]byte, error)) ([]backends.Ref, []byte, error) {
	n, b, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil {
		return nil, nil, err
	}
	if uint32(len(b)) < n*5 {
		return nil, nil, msgp.ErrShortBytes
	}
	var out []backends.Ref
	if n > 0 {
		out = make([]backends.Ref, n)
	}
	for i := range out {
		var parts uint32
		if parts, b, err = msgp.ReadArrayHeaderBytes(b); err != nil {
			return nil, nil, err
		}
		if parts != 4 {
			return nil, nil, fmt.Errorf("cell of %d parts, want 4", parts)
		}
		r := &out[i]
		if r.Index, b, err = msgp.ReadUint64Bytes(b); err != nil {
			return nil, nil, err
		}
		if r.Field, b, err = msgp.ReadStringBytes(b); err != nil {
			return nil, nil, err
		}
		if r.Gen, b, err = msgp.ReadUint64Bytes(b); err != nil {
			return nil, nil, err
		}
		if b, err = last(b, r); err != nil {
			return nil, nil, err
		}
	}
	return out, b, nil
}
