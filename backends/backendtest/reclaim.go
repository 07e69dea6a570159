package backendtest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
)

// reclaimTests run within RunMeta: Garbage, Swept and Abandon.
var reclaimTests = []struct {
	name string
	fn   func(*rt)
}{
	{"Superseded", testGarbageSuperseded},
	{"Stale", testGarbageStale},
	{"YoungReservation", testGarbageYoung},
	{"OldReservation", testGarbageOld},
	{"ReservationAges", testGarbageAges},
	{"ReservationOfCommittedRow", testGarbageRewrite},
	{"Delete", testGarbageDelete},
	{"DeletePartition", testGarbageDeletePartition},
	{"SweptReservation", testSweptReservation},
	{"SweptUnknown", testSweptUnknown},
	{"Abandon", testAbandon},
	{"Invalid", testGarbageInvalid},
	{"Model", testGarbageModel},
	{"Closed", testGarbageClosed},
}

// rt is one reclaim subtest: a metadata subtest, r its store.
type rt struct {
	*mt
	r metadata.MetaStore
}

// hour is an olderThan no reservation of a test reaches.
const hour = time.Hour

func (x *rt) garbage(p string, olderThan time.Duration) []metadata.Ref {
	x.t.Helper()
	refs, err := x.r.Garbage(x.ctx, p, olderThan)
	if err != nil {
		x.t.Fatalf("Garbage(%q, %v): %v", p, olderThan, err)
	}
	return refs
}

func (x *rt) swept(p string, refs []metadata.Ref) {
	x.t.Helper()
	if err := x.r.Swept(x.ctx, p, refs); err != nil {
		x.t.Fatalf("Swept(%q, %d refs): %v", p, len(refs), err)
	}
}

// wantGarbage checks Garbage(p, olderThan) against want, in any order.
func (x *rt) wantGarbage(what, p string, olderThan time.Duration, want ...metadata.Ref) []metadata.Ref {
	x.t.Helper()
	got := x.garbage(p, olderThan)
	x.wantRefs(what, got, want)
	return got
}

// ref names the cell of field f at generation gen of row index, written
// with the tag fields gives it ("" for a reservation never committed).
func ref(index uint64, f string, gen uint64, committed bool) metadata.Ref {
	r := metadata.Ref{Index: index, Field: f, Gen: gen}
	if committed {
		r.Tag = "tag-" + f
	}
	return r
}

func testGarbageSuperseded(x *rt) {
	p := x.part("p")
	r0 := x.prepare(p, []string{"k"}, []string{"f", "g"})
	x.commit(p, metadata.RowUpdate{Key: "k", Index: r0[0].Index, Fields: fields(r0[0], "f", "g")})
	x.wantGarbage("Garbage after a first commit", p, 0)
	r1 := x.prepare(p, []string{"k"}, []string{"f"})
	x.commit(p, metadata.RowUpdate{Key: "k", Index: r1[0].Index, Fields: fields(r1[0], "f")})
	idx := r0[0].Index
	old := ref(idx, "f", 0, true)
	x.wantGarbage("Garbage after a rewrite", p, hour, old)
	got := x.wantGarbage("Garbage again, before Swept", p, 0, old)
	x.swept(p, got)
	x.wantGarbage("Garbage after Swept", p, 0)
	x.wantRows("Lookup after Swept", x.lookup(p, "k"), []*metadata.Row{{Key: "k", Index: idx, Fields: map[string]metadata.FieldInfo{
		"f": cell("float32", 1, "tag-f"), "g": cell("float32", 0, "tag-g"),
	}}}, true)
}

func testGarbageStale(x *rt) {
	p := x.part("p")
	r0 := x.prepare(p, []string{"k"}, []string{"f"})
	r1 := x.prepare(p, []string{"k"}, []string{"f"})
	idx := r0[0].Index
	x.commit(p, metadata.RowUpdate{Key: "k", Index: idx, Fields: fields(r1[0], "f")})
	x.wantGarbage("Garbage with the older write pending", p, hour)
	res := x.commit(p, metadata.RowUpdate{Key: "k", Index: idx, Fields: fields(r0[0], "f")})
	x.wantRefs("Stale", res.Stale, []metadata.Ref{ref(idx, "f", 0, true)})
	x.swept(p, x.wantGarbage("Garbage after a stale commit", p, hour, ref(idx, "f", 0, true)))
	x.wantGarbage("Garbage after Swept", p, 0)
}

func testGarbageYoung(x *rt) {
	p := x.part("p")
	r := x.prepare(p, []string{"a", "b"}, []string{"f"})
	x.wantGarbage("Garbage(1h) of young reservations", p, hour)
	x.commit(p,
		metadata.RowUpdate{Key: "a", Index: r[0].Index, Fields: fields(r[0], "f")},
		metadata.RowUpdate{Key: "b", Index: r[1].Index, Fields: fields(r[1], "f")})
	x.wantGarbage("Garbage after they committed", p, 0)
	if rows := x.list(p); len(rows) != 2 {
		x.t.Errorf("List after committing two young reservations: %s", rowKeys(rows))
	}
}

func testGarbageOld(x *rt) {
	p := x.part("p")
	r := x.prepare(p, []string{"a", "b"}, []string{"f", "g"})
	want := []metadata.Ref{
		ref(r[0].Index, "f", 0, false), ref(r[0].Index, "g", 0, false),
		ref(r[1].Index, "f", 0, false), ref(r[1].Index, "g", 0, false),
	}
	x.wantGarbage("Garbage(0) aborts every reservation", p, 0, want...)
	x.wantGarbage("Garbage(1h) after: still garbage", p, hour, want...)
	x.wantConflict("Commit of an aborted reservation", p,
		metadata.RowUpdate{Key: "a", Index: r[0].Index, Fields: fields(r[0], "f", "g")})
	x.wantConflict("Commit of one aborted field", p,
		metadata.RowUpdate{Key: "b", Index: r[1].Index, Fields: fields(r[1], "g")})
	x.wantConflict("Commit of a tag with an aborted field", p,
		metadata.RowUpdate{Key: "b", Index: r[1].Index, Fields: fields(r[1], "f"), Tag: map[string]any{"t": "x"}})
	x.wantRows("Lookup after the conflicts", x.lookup(p, "a", "b"), []*metadata.Row{nil, nil}, true)
	x.wantGarbage("Garbage after the conflicts", p, hour, want...)
}

func testGarbageAges(x *rt) {
	p := x.part("p")
	// The older reservation is older than age for sure; the younger has
	// all of age to spare between its Prepare and Garbage.
	const age = 500 * time.Millisecond
	old := x.prepare(p, []string{"old"}, []string{"f"})
	time.Sleep(age + 50*time.Millisecond)
	young := x.prepare(p, []string{"young"}, []string{"f"})
	x.wantGarbage("Garbage(age) of one reservation older and one younger than age", p, age, ref(old[0].Index, "f", 0, false))
	x.commit(p, metadata.RowUpdate{Key: "young", Index: young[0].Index, Fields: fields(young[0], "f")})
	x.wantConflict("Commit of the aborted older reservation", p,
		metadata.RowUpdate{Key: "old", Index: old[0].Index, Fields: fields(old[0], "f")})
}

func testGarbageRewrite(x *rt) {
	p := x.part("p")
	r0 := x.prepare(p, []string{"k"}, []string{"f"})
	x.commit(p, metadata.RowUpdate{Key: "k", Index: r0[0].Index, Fields: fields(r0[0], "f")})
	r1 := x.prepare(p, []string{"k"}, []string{"f"})
	x.wantGarbage("Garbage(0) with a rewrite pending", p, 0, ref(r0[0].Index, "f", 1, false))
	x.wantConflict("Commit of the aborted rewrite", p,
		metadata.RowUpdate{Key: "k", Index: r1[0].Index, Fields: fields(r1[0], "f")})
	x.wantRows("Lookup after the aborted rewrite", x.lookup(p, "k"), []*metadata.Row{{Key: "k", Index: r0[0].Index, Fields: fields(r0[0], "f")}}, true)
	// A later rewrite commits and supersedes the first generation.
	r2 := x.prepare(p, []string{"k"}, []string{"f"})
	x.commit(p, metadata.RowUpdate{Key: "k", Index: r2[0].Index, Fields: fields(r2[0], "f")})
	x.wantGarbage("Garbage after a later rewrite", p, hour, ref(r0[0].Index, "f", 1, false), ref(r0[0].Index, "f", 0, true))
}

func testGarbageDelete(x *rt) {
	p := x.part("p")
	r := x.prepare(p, []string{"a", "b"}, []string{"x", "y"})
	x.commit(p,
		metadata.RowUpdate{Key: "a", Index: r[0].Index, Fields: fields(r[0], "x", "y")},
		metadata.RowUpdate{Key: "b", Index: r[1].Index, Fields: fields(r[1], "x", "y")})
	ra := x.prepare(p, []string{"a"}, []string{"x"})
	x.commit(p, metadata.RowUpdate{Key: "a", Index: ra[0].Index, Fields: fields(ra[0], "x")})
	x.swept(p, x.garbage(p, hour)) // a's x#0, deleted as a put does
	rc := x.prepare(p, []string{"a", "c"}, []string{"x"})

	a, c := r[0].Index, rc[1].Index
	x.delete(p, "a", "c")
	committed := []metadata.Ref{ref(a, "x", 1, true), ref(a, "y", 0, true)}
	got := x.wantGarbage("Garbage(1h) after Delete: the removed row's committed cells", p, hour, committed...)
	x.wantConflict("Commit of a removed row's reservation", p,
		metadata.RowUpdate{Key: "a", Index: a, Fields: fields(rc[0], "x")})
	x.swept(p, got)
	x.wantGarbage("Garbage(1h) after Swept: the removed rows' young reservations are kept", p, hour)
	x.swept(p, x.wantGarbage("Garbage(0) after Delete: their reservations", p, 0,
		ref(a, "x", 2, false), ref(c, "x", 0, false)))
	x.wantGarbage("Garbage after Swept", p, 0)
	x.wantRows("List after all", x.list(p), []*metadata.Row{{Key: "b", Index: r[1].Index, Fields: fields(r[1], "x", "y")}}, true)
}

func testGarbageDeletePartition(x *rt) {
	p := x.part("p")
	r := x.prepare(p, []string{"a", "b"}, []string{"f"})
	x.commit(p,
		metadata.RowUpdate{Key: "a", Index: r[0].Index, Fields: fields(r[0], "f")},
		metadata.RowUpdate{Key: "b", Index: r[1].Index, Fields: fields(r[1], "f")})
	rb := x.prepare(p, []string{"b", "c"}, []string{"f"})
	x.deletePartition(p)
	if ps := x.partitions(); len(ps) != 0 {
		x.t.Errorf("Partitions after DeletePartition: %q, want none", ps)
	}
	x.wantConflict("Commit of a reservation of a cleared partition", p,
		metadata.RowUpdate{Key: "b", Index: rb[0].Index, Fields: fields(rb[0], "f")})
	x.wantGarbage("Garbage(1h) after DeletePartition", p, hour, ref(r[0].Index, "f", 0, true), ref(r[1].Index, "f", 0, true))
	all := x.wantGarbage("Garbage(0) after DeletePartition", p, 0,
		ref(r[0].Index, "f", 0, true), ref(r[1].Index, "f", 0, true),
		ref(r[1].Index, "f", 1, false), ref(rb[1].Index, "f", 0, false))
	x.swept(p, all[:1])
	x.wantGarbage("Garbage after sweeping one", p, 0, all[1:]...)
	x.swept(p, all[1:])
	x.wantGarbage("Garbage after sweeping all", p, 0)

	// The partition is used again as a new one.
	r2 := x.prepare(p, []string{"a"}, []string{"f"})
	if r2[0].Index <= rb[1].Index {
		x.t.Errorf("index %d after DeletePartition, want above %d", r2[0].Index, rb[1].Index)
	}
	x.commit(p, metadata.RowUpdate{Key: "a", Index: r2[0].Index, Fields: fields(r2[0], "f")})
	x.wantGarbage("Garbage of the partition used again", p, 0)
}

func testSweptReservation(x *rt) {
	p := x.part("p")
	r := x.prepare(p, []string{"a", "b"}, []string{"f"})
	x.swept(p, []metadata.Ref{ref(r[0].Index, "f", 0, false)}) // a rolled-back put's cells
	x.wantConflict("Commit of a reservation reported swept", p,
		metadata.RowUpdate{Key: "a", Index: r[0].Index, Fields: fields(r[0], "f")})
	x.wantGarbage("Garbage(0) after Swept of one reservation", p, 0, ref(r[1].Index, "f", 0, false))
}

// Abandon of a rolled-back put's reservations makes them garbage at
// once (with the refs' tags), whatever olderThan, and their Commit then
// conflicts; a removed row's reservation and a cell already garbage are
// known too.
func testAbandon(x *rt) {
	p := x.part("p")
	r := x.prepare(p, []string{"a", "b", "c"}, []string{"f"})
	x.commit(p, metadata.RowUpdate{Key: "c", Index: r[2].Index, Fields: fields(r[2], "f")})
	rc := x.prepare(p, []string{"c"}, []string{"f"})
	x.commit(p, metadata.RowUpdate{Key: "c", Index: rc[0].Index, Fields: fields(rc[0], "f")}) // c's f#0 is garbage
	x.delete(p, "b")                                                                          // b's f#0 is an orphan
	x.swept(p, []metadata.Ref{ref(r[2].Index, "f", 0, true)})
	rc2 := x.prepare(p, []string{"c"}, []string{"f"})
	x.commit(p, metadata.RowUpdate{Key: "c", Index: rc2[0].Index, Fields: fields(rc2[0], "f")}) // c's f#1 is garbage
	own := []metadata.Ref{
		{Index: r[0].Index, Field: "f", Gen: 0, Tag: "t-a"}, // pending
		{Index: r[1].Index, Field: "f", Gen: 0, Tag: "t-b"}, // an orphan
		ref(r[2].Index, "f", 1, true),                       // garbage already
	}
	if err := x.r.Abandon(x.ctx, p, own); err != nil {
		x.t.Fatalf("Abandon of known reservations: %v", err)
	}
	x.wantConflict("Commit of an abandoned reservation", p,
		metadata.RowUpdate{Key: "a", Index: r[0].Index, Fields: fields(r[0], "f")})
	x.wantGarbage("Garbage(1h) after Abandon", p, hour, own...)
	if err := x.r.Abandon(x.ctx, p, nil); err != nil {
		x.t.Errorf("Abandon of nothing: %v", err)
	}
}

func testSweptUnknown(x *rt) {
	p := x.part("p")
	r := x.prepare(p, []string{"a"}, []string{"f"})
	x.commit(p, metadata.RowUpdate{Key: "a", Index: r[0].Index, Fields: fields(r[0], "f")})
	committed := ref(r[0].Index, "f", 0, true)
	x.swept(p, []metadata.Ref{committed, ref(r[0].Index, "f", 7, false), ref(12345, "zz", 3, false)})
	x.swept(x.part("unknown"), []metadata.Ref{committed})
	x.swept(p, nil)
	x.wantRows("Lookup after Swept of a committed cell", x.lookup(p, "a"), []*metadata.Row{{Key: "a", Index: r[0].Index, Fields: fields(r[0], "f")}}, true)
	x.wantGarbage("Garbage after Swept of cells that are no garbage", p, 0)
	x.wantGarbage("Garbage of an unknown partition", x.part("unknown"), 0)
}

func testGarbageInvalid(x *rt) {
	p := x.part("p")
	x.prepare(p, []string{"a"}, []string{"f"})
	if refs, err := x.r.Garbage(x.ctx, p, -time.Second); !errors.Is(err, backends.ErrInvalid) {
		x.t.Errorf("Garbage(-1s) = %v, %v; want an error wrapping %v", refs, err, backends.ErrInvalid)
	}
	x.wantGarbage("Garbage(1h) after an invalid call", p, hour)
}

func testGarbageClosed(x *rt) {
	p := x.part("p")
	x.prepare(p, []string{"a"}, []string{"f"})
	if err := x.m.Close(); err != nil {
		x.t.Fatalf("Close: %v", err)
	}
	if _, err := x.r.Garbage(x.ctx, p, 0); !errors.Is(err, backends.ErrClosed) {
		x.t.Errorf("Garbage after Close: %v, want an error wrapping %v", err, backends.ErrClosed)
	}
	if err := x.r.Swept(x.ctx, p, []metadata.Ref{{Field: "f"}}); !errors.Is(err, backends.ErrClosed) {
		x.t.Errorf("Swept after Close: %v, want an error wrapping %v", err, backends.ErrClosed)
	}
}

// testGarbageModel runs random sequences of Prepare, Commit, Delete,
// DeletePartition, Garbage and Swept against a model of what each cell
// is, and checks after every step that Garbage returns exactly the
// model's garbage (never a cell a committed row references or a young
// reservation), that List holds the model's rows, and that a Commit
// conflicts exactly when the model says it must.
func testGarbageModel(x *rt) {
	for seed := range uint64(12) {
		m := newGarbageModel(x, x.part(fmt.Sprint("s", seed)), seed)
		for step := range 150 {
			m.step()
			if x.t.Failed() {
				x.t.Fatalf("seed %d, step %d: %s", seed, step, m.log)
			}
		}
	}
}

// cellState is what the model knows of a cell handed out.
type cellState int

const (
	cellPending   cellState = iota // reserved, may commit
	cellOrphan                     // reserved for a removed row: garbage once aborted by age
	cellCommitted                  // a committed row references it
	cellGarbage                    // unreferenced, not yet swept
	cellSwept                      // deleted and reported
)

type modelCell struct {
	metadata.Ref // Tag as Garbage must report it
	state        cellState
}

type modelRow struct {
	index  uint64
	fields map[string]uint64 // committed generation per field
}

type reservation struct {
	key   string
	index uint64
	gens  map[string]uint64
}

type garbageModel struct {
	x    *rt
	p    string
	rng  *rand.Rand
	rows map[string]*modelRow // live rows (committed or not)
	// cells by identity, reservations not yet committed or dropped
	cells map[cellID]*modelCell
	res   []reservation
	last  []metadata.Ref // the last Garbage's result
	log   string         // the last step, for failure messages
}

type cellID struct {
	index, gen uint64
	field      string
}

func newGarbageModel(x *rt, p string, seed uint64) *garbageModel {
	return &garbageModel{x: x, p: p, rng: rand.New(rand.NewPCG(seed, 0x5eed)),
		rows: map[string]*modelRow{}, cells: map[cellID]*modelCell{}}
}

var (
	modelKeys   = []string{"a", "b", "c", "d"}
	modelFields = []string{"f", "g", "h"}
)

// pick returns a random non-empty subset of names, in their order.
func (m *garbageModel) pick(names []string) []string {
	for {
		var out []string
		for _, n := range names {
			if m.rng.IntN(2) == 0 {
				out = append(out, n)
			}
		}
		if len(out) > 0 {
			return out
		}
	}
}

func (m *garbageModel) step() {
	switch n := m.rng.IntN(20); {
	case n < 6:
		m.prepare()
	case n < 12:
		m.commit()
	case n < 14:
		keys := m.pick(modelKeys)
		m.log = fmt.Sprintf("Delete %q", keys)
		m.x.delete(m.p, keys...)
		for _, k := range keys {
			m.remove(k)
		}
	case n < 15:
		m.log = "DeletePartition"
		m.x.deletePartition(m.p)
		for k := range m.rows {
			m.remove(k)
		}
	case n < 18:
		m.sweep()
	default:
		m.log = "Garbage(0)"
		for _, c := range m.cells {
			if c.state == cellPending || c.state == cellOrphan {
				c.state = cellGarbage
			}
		}
		m.check(0)
		return
	}
	m.check(hour)
}

func (m *garbageModel) prepare() {
	keys, fields := m.pick(modelKeys), m.pick(modelFields)
	m.log = fmt.Sprintf("Prepare %q %q", keys, fields)
	out := m.x.prepare(m.p, keys, fields)
	for i, k := range keys {
		r := m.rows[k]
		if r == nil {
			r = &modelRow{index: out[i].Index}
			m.rows[k] = r
		} else if out[i].Index != r.index {
			m.x.t.Errorf("Prepare of live row %q: index %d, want %d", k, out[i].Index, r.index)
		}
		for f, g := range out[i].Gens {
			id := cellID{r.index, g, f}
			if m.cells[id] != nil {
				m.x.t.Errorf("Prepare handed out %v twice", id)
			}
			m.cells[id] = &modelCell{Ref: metadata.Ref{Index: r.index, Field: f, Gen: g}}
		}
		m.res = append(m.res, reservation{key: k, index: out[i].Index, gens: out[i].Gens})
	}
}

// commit commits some fields of a random reservation made so far.
func (m *garbageModel) commit() {
	if len(m.res) == 0 {
		return
	}
	i := m.rng.IntN(len(m.res))
	rs := m.res[i]
	m.res = slices.Delete(m.res, i, i+1)
	var names []string
	for f := range rs.gens {
		names = append(names, f)
	}
	slices.Sort(names)
	names = m.pick(names)
	up := metadata.RowUpdate{Key: rs.key, Index: rs.index, Fields: map[string]metadata.FieldInfo{}}
	conflict := m.rows[rs.key] == nil || m.rows[rs.key].index != rs.index
	for _, f := range names {
		g := rs.gens[f]
		up.Fields[f] = cell("float32", g, "tag-"+f)
		if m.cells[cellID{rs.index, g, f}].state != cellPending {
			conflict = true
		}
	}
	m.log = fmt.Sprintf("Commit %q index %d %v (conflict: %v)", rs.key, rs.index, up.Fields, conflict)
	if conflict {
		m.x.wantConflict(m.log, m.p, up)
		return
	}
	m.x.commit(m.p, up)
	r := m.rows[rs.key]
	if r.fields == nil {
		r.fields = map[string]uint64{}
	}
	for _, f := range names {
		g := rs.gens[f]
		c := m.cells[cellID{rs.index, g, f}]
		c.Tag = "tag-" + f
		old, had := r.fields[f]
		switch {
		case had && old > g:
			c.state = cellGarbage // stale
		default:
			if had {
				m.cells[cellID{rs.index, old, f}].state = cellGarbage
			}
			r.fields[f] = g
			c.state = cellCommitted
		}
	}
}

// remove is the model of deleting key's row.
func (m *garbageModel) remove(key string) {
	r := m.rows[key]
	if r == nil {
		return
	}
	delete(m.rows, key)
	for _, c := range m.cells {
		if c.Index != r.index {
			continue
		}
		switch c.state {
		case cellCommitted:
			c.state = cellGarbage
		case cellPending:
			c.state = cellOrphan
		}
	}
}

// sweep reports a random part of the last Garbage swept, and sometimes a
// pending reservation (as a rollback does).
func (m *garbageModel) sweep() {
	var refs []metadata.Ref
	for _, r := range m.last {
		if m.rng.IntN(3) > 0 {
			refs = append(refs, r)
		}
	}
	if len(m.res) > 0 && m.rng.IntN(2) == 0 {
		rs := m.res[m.rng.IntN(len(m.res))]
		for f, g := range rs.gens {
			refs = append(refs, metadata.Ref{Index: rs.index, Field: f, Gen: g})
		}
	}
	m.log = fmt.Sprintf("Swept %+v", refs)
	m.x.swept(m.p, refs)
	for _, r := range refs {
		c := m.cells[cellID{r.Index, r.Gen, r.Field}]
		switch c.state {
		case cellGarbage, cellPending, cellOrphan:
			c.state = cellSwept
		}
	}
}

// check compares Garbage(olderThan) and List with the model.
func (m *garbageModel) check(olderThan time.Duration) {
	m.x.t.Helper()
	var want []metadata.Ref
	for _, c := range m.cells {
		if c.state == cellGarbage {
			want = append(want, c.Ref)
		}
	}
	m.last = m.x.wantGarbage(m.log+": Garbage", m.p, olderThan, want...)
	var rows []*metadata.Row
	for k, r := range m.rows {
		if r.fields == nil {
			continue // never committed
		}
		row := &metadata.Row{Key: k, Index: r.index, Fields: map[string]metadata.FieldInfo{}}
		for f, g := range r.fields {
			row.Fields[f] = cell("float32", g, "tag-"+f)
		}
		rows = append(rows, row)
	}
	m.x.wantRows(m.log+": List", m.x.list(m.p), rows, false)
}
