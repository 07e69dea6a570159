package backendtest

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
)

// RunColocated checks that the engines newEngine returns, whose Meta must
// be a metadata.Colocated, keep its contract (see the package doc), one
// subtest per rule, each on a fresh engine from newEngine. The OtherClient
// subtest calls newEngine twice and expects the two engines to reach the
// same data and metadata (one server), as two processes would.
func RunColocated(t *testing.T, newEngine func(t *testing.T) backends.Engine) {
	t.Helper()
	nonce := newNonce()
	for _, tc := range colocatedTests {
		t.Run(tc.name, func(t *testing.T) {
			eng := newEngine(t)
			c, ok := eng.Meta.(metadata.Colocated)
			if !ok {
				t.Fatalf("the engine's Meta (%T) is not a metadata.Colocated", eng.Meta)
			}
			tc.fn(&ct{mt: &mt{t: t, ctx: t.Context(), m: c, prefix: prefix(nonce, t)}, c: c, eng: eng, newEngine: newEngine})
		})
	}
}

var colocatedTests = []struct {
	name string
	fn   func(*ct)
}{
	{"WriteCommit", testWriteCommit},
	{"WriteCommitResult", testWriteCommitResult},
	{"WriteCommitConflict", testWriteCommitConflict},
	{"WriteCommitStaged", testWriteCommitStaged},
	{"ReadRows", testReadRows},
	{"ReadRowsPlanError", testReadRowsPlanError},
	{"ReadRowsChanged", testReadRowsChanged},
	{"OtherClient", testReadRowsOtherClient},
	{"Closed", testColocatedClosed},
}

// ct is one Colocated subtest: a metadata subtest over the engine's Meta.
type ct struct {
	*mt
	c         metadata.Colocated
	eng       backends.Engine
	newEngine func(t *testing.T) backends.Engine
}

// colFields is the Fields of a commit of each field with its reserved
// generation; a Colocated's cells have no tags, so BackendTag is "".
func colFields(r metadata.Reservation, names ...string) map[string]metadata.FieldInfo {
	out := make(map[string]metadata.FieldInfo, len(names))
	for _, f := range names {
		out[f] = metadata.FieldInfo{DType: "uint8", Shape: []int64{1}, Gen: r.Gens[f]}
	}
	return out
}

// colValue is the value of key's field f at generation gen.
func colValue(p, key, f string, gen uint64) []byte {
	return value(fmt.Sprint(p, "/", key, "/", f, "/", gen), 40+len(key)*100+int(gen))
}

// writeCommit prepares keys' fields on c, writes their cells and commits
// them with WriteCommit, and returns the reservations and the result.
func (x *ct) writeCommit(c metadata.Colocated, p string, keys, fields []string) ([]metadata.Reservation, metadata.CommitResult) {
	x.t.Helper()
	res := x.prepareOn(c, p, keys, fields)
	cells, ups := colUpdate(p, keys, fields, res)
	for i := range cells {
		cells[i].Tag = "not-the-engine's"
	}
	cr, err := c.WriteCommit(x.ctx, p, cells, ups)
	if err != nil {
		x.t.Fatalf("WriteCommit of %d rows to %q: %v", len(keys), p, err)
	}
	for _, c := range cells {
		if c.Tag != "" {
			x.t.Fatalf("WriteCommit set cell %q's Tag to %q, want \"\"", c.Key, c.Tag)
		}
	}
	return res, cr
}

func (x *ct) prepareOn(m metadata.MetaStore, p string, keys, fields []string) []metadata.Reservation {
	x.t.Helper()
	res, err := m.Prepare(x.ctx, p, keys, fields, nil)
	if err != nil || len(res) != len(keys) {
		x.t.Fatalf("Prepare(%q, %q, %q): %d reservations, %v", p, keys, fields, len(res), err)
	}
	return res
}

// colUpdate returns the cells and updates of a commit of keys' fields
// under res.
func colUpdate(p string, keys, fields []string, res []metadata.Reservation) ([]backends.Cell, []metadata.RowUpdate) {
	var cells []backends.Cell
	ups := make([]metadata.RowUpdate, len(keys))
	for i, k := range keys {
		for _, f := range fields {
			gen := res[i].Gens[f]
			v := colValue(p, k, f, gen)
			cells = append(cells, backends.Cell{Key: backends.StorageKey(res[i].Index, f, gen), Head: v[:3], Body: v[3:]})
		}
		ups[i] = metadata.RowUpdate{Key: k, Index: res[i].Index, Fields: colFields(res[i], fields...)}
	}
	return cells, ups
}

// planner is a ReadRows plan that reads every field of every row into
// destinations of the length colValue gives, and remembers what it saw
// and planned last.
type planner struct {
	p     string
	calls int
	rows  []*metadata.Row
	cells []backends.ReadCell
}

func (pl *planner) plan(rows []*metadata.Row) ([]backends.ReadCell, error) {
	pl.calls++
	pl.rows, pl.cells = rows, nil
	for _, r := range rows {
		if r == nil {
			continue
		}
		for f, fi := range r.Fields {
			n := len(colValue(pl.p, r.Key, f, fi.Gen))
			buf := make([]byte, n)
			pl.cells = append(pl.cells, backends.ReadCell{Key: backends.StorageKey(r.Index, f, fi.Gen), Tag: fi.BackendTag, Head: buf[:3], Body: buf[3:]})
		}
	}
	return pl.cells, nil
}

// readRows calls ReadRows on c with a planner and checks what the contract
// promises of any call: one row per key, the rows plan last saw returned,
// each cell plan asked for read into its destinations with the value of
// the row's generation.
func (x *ct) readRows(c metadata.Colocated, p string, keys ...string) []*metadata.Row {
	x.t.Helper()
	pl := &planner{p: p}
	rows, err := c.ReadRows(x.ctx, p, keys, pl.plan)
	if err != nil {
		x.t.Fatalf("ReadRows(%q, %q): %v", p, keys, err)
	}
	switch {
	case pl.calls == 0:
		x.t.Fatalf("ReadRows(%q, %q) never called plan", p, keys)
	case len(rows) != len(keys) || len(pl.rows) != len(keys):
		x.t.Fatalf("ReadRows of %d keys: returned %d rows, plan saw %d", len(keys), len(rows), len(pl.rows))
	}
	for i, r := range rows {
		if r != pl.rows[i] {
			x.t.Errorf("ReadRows: row %d returned is not the row plan last saw", i)
		}
		if r != nil && r.Key != keys[i] {
			x.t.Errorf("ReadRows: row %d is key %q, want %q", i, r.Key, keys[i])
		}
	}
	for _, rc := range pl.cells {
		if !rc.Found {
			x.t.Errorf("ReadRows: cell %q of a row plan saw is not Found", rc.Key)
			continue
		}
		got := append(append([]byte{}, rc.Head...), rc.Body...)
		if rc.Value != nil {
			got = rc.Value
		}
		var want []byte
		for _, r := range rows {
			if r == nil {
				continue
			}
			for f, fi := range r.Fields {
				if backends.StorageKey(r.Index, f, fi.Gen) == rc.Key {
					want = colValue(p, r.Key, f, fi.Gen)
				}
			}
		}
		if !bytes.Equal(got, want) {
			x.t.Errorf("ReadRows: cell %q read %d bytes%s, want the %d of its row's generation", rc.Key, len(got), firstDiff(got, want), len(want))
		}
	}
	return rows
}

func testWriteCommit(x *ct) {
	p := x.part("p")
	keys, flds := []string{"a", "b", "c"}, []string{"f", "g"}
	res, cr := x.writeCommit(x.c, p, keys, flds)
	if len(cr.Stale)+len(cr.Superseded) != 0 {
		x.t.Errorf("first WriteCommit: result %+v, want none", cr)
	}
	want := make([]*metadata.Row, len(keys))
	for i, k := range keys {
		want[i] = &metadata.Row{Key: k, Index: res[i].Index, Fields: colFields(res[i], flds...)}
	}
	x.wantRows("Lookup after WriteCommit", x.lookup(p, keys...), want, true)
	// The cells are in the engine's Store too.
	cells, _ := colUpdate(p, keys, flds, res)
	rc := make([]backends.ReadCell, len(cells))
	for i, c := range cells {
		rc[i] = backends.ReadCell{Key: c.Key}
	}
	if err := x.eng.Data.Read(x.ctx, rc); err != nil {
		x.t.Fatalf("Store.Read of cells WriteCommit wrote: %v", err)
	}
	for i, c := range rc {
		if !c.Found || !bytes.Equal(c.Value, append(append([]byte{}, cells[i].Head...), cells[i].Body...)) {
			x.t.Errorf("Store.Read of cell %q WriteCommit wrote: Found %v, %d bytes", c.Key, c.Found, len(c.Value))
		}
	}
	if _, err := x.c.WriteCommit(x.ctx, p, nil, nil); err != nil {
		x.t.Errorf("WriteCommit of nothing: %v", err)
	}
}

// WriteCommit returns what Commit would: the generation it replaces as
// Superseded, its own as Stale when a newer one is committed.
func testWriteCommitResult(x *ct) {
	p := x.part("p")
	first, _ := x.writeCommit(x.c, p, []string{"a"}, []string{"f"})
	older := x.prepareOn(x.c, p, []string{"a"}, []string{"f"})
	_, cr := x.writeCommit(x.c, p, []string{"a"}, []string{"f"})
	idx := first[0].Index
	x.wantRefs("Superseded of a rewrite", cr.Superseded, []metadata.Ref{{Index: idx, Field: "f", Gen: first[0].Gens["f"]}})
	cells, ups := colUpdate(p, []string{"a"}, []string{"f"}, older)
	cr, err := x.c.WriteCommit(x.ctx, p, cells, ups)
	if err != nil {
		x.t.Fatalf("WriteCommit of an older generation: %v", err)
	}
	x.wantRefs("Stale of an older generation", cr.Stale, []metadata.Ref{{Index: idx, Field: "f", Gen: older[0].Gens["f"]}})
	if len(cr.Superseded) != 0 {
		x.t.Errorf("WriteCommit of an older generation: Superseded %+v, want none", cr.Superseded)
	}
}

// A WriteCommit whose row was cleared after Prepare fails with
// ErrConflict and applies nothing.
func testWriteCommitConflict(x *ct) {
	p := x.part("p")
	x.writeCommit(x.c, p, []string{"keep"}, []string{"f"})
	res := x.prepareOn(x.c, p, []string{"a", "keep"}, []string{"f"})
	x.delete(p, "a")
	x.delete(p, "a") // the reservation is gone either way
	cells, ups := colUpdate(p, []string{"a", "keep"}, []string{"f"}, res)
	_, err := x.c.WriteCommit(x.ctx, p, cells, ups)
	if !errors.Is(err, backends.ErrConflict) || errors.Is(err, backends.ErrOutcomeUnknown) {
		x.t.Fatalf("WriteCommit of a cleared row: %v, want ErrConflict", err)
	}
	rows := x.lookup(p, "a", "keep")
	if rows[0] != nil {
		x.t.Errorf("WriteCommit that failed with ErrConflict committed the cleared row")
	}
	if rows[1] == nil || rows[1].Fields["f"].Gen == res[1].Gens["f"] {
		x.t.Errorf("WriteCommit that failed with ErrConflict committed another row of the call")
	}
}

// WriteCommit of cells the engine's Store staged publishes them, as
// Store.Write does.
func testWriteCommitStaged(x *ct) {
	st, ok := x.eng.Data.(backends.Stager)
	if !ok {
		x.t.Skip("the engine's Store is not a backends.Stager")
	}
	p := x.part("p")
	keys := []string{"a", "b"}
	res := x.prepareOn(x.c, p, keys, []string{"f"})
	want, ups := colUpdate(p, keys, []string{"f"}, res)
	cells := make([]backends.Cell, len(want))
	sizes := make([]int, len(want))
	for i, c := range want {
		cells[i], sizes[i] = backends.Cell{Key: c.Key}, len(c.Head)+len(c.Body)
	}
	if err := st.Stage(x.ctx, cells, sizes); err != nil {
		x.t.Fatalf("Stage: %v", err)
	}
	for i, c := range cells {
		copy(c.Body[copy(c.Body, want[i].Head):], want[i].Body)
	}
	if _, err := x.c.WriteCommit(x.ctx, p, cells, ups); err != nil {
		x.t.Fatalf("WriteCommit of staged cells: %v", err)
	}
	st.Unstage(cells) // published: a no-op
	x.readRows(x.c, p, keys...)
}

// ReadRows gives plan the committed rows (nil for unknown and uncommitted
// keys), reads the cells plan asks for and returns the rows plan saw.
func testReadRows(x *ct) {
	p := x.part("p")
	res, _ := x.writeCommit(x.c, p, []string{"a", "b"}, []string{"f", "g"})
	x.prepareOn(x.c, p, []string{"pending"}, []string{"f"})
	rows := x.readRows(x.c, p, "a", "unknown", "b", "pending", "a")
	want := []*metadata.Row{
		{Key: "a", Index: res[0].Index, Fields: colFields(res[0], "f", "g")}, nil,
		{Key: "b", Index: res[1].Index, Fields: colFields(res[1], "f", "g")}, nil,
		{Key: "a", Index: res[0].Index, Fields: colFields(res[0], "f", "g")},
	}
	x.wantRows("ReadRows", rows, want, true)
	rows = x.readRows(x.c, x.part("unknown partition"), "a")
	if rows[0] != nil {
		x.t.Errorf("ReadRows of an unknown partition: a row")
	}
}

func testReadRowsPlanError(x *ct) {
	p := x.part("p")
	x.writeCommit(x.c, p, []string{"a"}, []string{"f"})
	sentinel := errors.New("plan says no")
	_, err := x.c.ReadRows(x.ctx, p, []string{"a"}, func([]*metadata.Row) ([]backends.ReadCell, error) { return nil, sentinel })
	if err != sentinel {
		x.t.Errorf("ReadRows with a failing plan: %v, want plan's error as it is", err)
	}
}

// ReadRows after the rows changed through the same MetaStore (a Commit
// after Store.Write, not WriteCommit) sees the new rows and their cells.
func testReadRowsChanged(x *ct) {
	p := x.part("p")
	x.writeCommit(x.c, p, []string{"a", "b"}, []string{"f"})
	x.readRows(x.c, p, "a", "b")
	res := x.prepareOn(x.c, p, []string{"a"}, []string{"f"})
	cells, ups := colUpdate(p, []string{"a"}, []string{"f"}, res)
	if err := x.eng.Data.Write(x.ctx, cells); err != nil {
		x.t.Fatalf("Store.Write: %v", err)
	}
	x.commit(p, ups...)
	rows := x.readRows(x.c, p, "a", "b")
	if rows[0] == nil || rows[0].Fields["f"].Gen != res[0].Gens["f"] {
		x.t.Errorf("ReadRows after a rewrite through the same MetaStore: %s, want generation %d", rowKeys(rows[:1]), res[0].Gens["f"])
	}
	x.delete(p, "b")
	if rows := x.readRows(x.c, p, "a", "b"); rows[1] != nil {
		x.t.Errorf("ReadRows after Delete of the row: a row")
	}
}

// ReadRows after another client (a second engine over the same server)
// rewrote or deleted the rows sees the new rows and their cells.
func testReadRowsOtherClient(x *ct) {
	p := x.part("p")
	other, ok := x.newEngine(x.t).Meta.(metadata.Colocated)
	if !ok {
		x.t.Fatal("the second engine's Meta is not a metadata.Colocated")
	}
	x.writeCommit(x.c, p, []string{"a", "b"}, []string{"f"})
	x.readRows(x.c, p, "a", "b")
	x.readRows(other, p, "a", "b")
	res, _ := x.writeCommit(other, p, []string{"a"}, []string{"f"})
	rows := x.readRows(x.c, p, "a", "b")
	if rows[0] == nil || rows[0].Fields["f"].Gen != res[0].Gens["f"] {
		x.t.Errorf("ReadRows after another client's rewrite: %s, want generation %d", rowKeys(rows[:1]), res[0].Gens["f"])
	}
	if _, err := other.Delete(x.ctx, p, []string{"b"}); err != nil {
		x.t.Fatalf("Delete through the other client: %v", err)
	}
	if rows := x.readRows(x.c, p, "a", "b"); rows[1] != nil {
		x.t.Errorf("ReadRows after another client deleted the row: a row")
	}
}

func testColocatedClosed(x *ct) {
	p := x.part("p")
	res := x.prepareOn(x.c, p, []string{"a"}, []string{"f"})
	if err := x.c.Close(); err != nil {
		x.t.Fatalf("Close: %v", err)
	}
	cells, ups := colUpdate(p, []string{"a"}, []string{"f"}, res)
	_, err := x.c.WriteCommit(x.ctx, p, cells, ups)
	x.wantErr("WriteCommit after Close", err, backends.ErrClosed)
	_, err = x.c.ReadRows(x.ctx, p, []string{"a"}, (&planner{p: p}).plan)
	x.wantErr("ReadRows after Close", err, backends.ErrClosed)
}

func (x *mt) wantErr(what string, err, target error) {
	x.t.Helper()
	if !errors.Is(err, target) {
		x.t.Errorf("%s: got error %v, want one wrapping %v", what, err, target)
	}
}
