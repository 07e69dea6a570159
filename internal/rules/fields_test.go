package rules

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
)

// putAll prepares and commits fields for keys, each cell tagged by its
// field, with tag on every row.
func putAll(t *testing.T, p *Partition, next *uint64, now int64, keys, fields []string, tag map[string]any) {
	t.Helper()
	res := prepare(t, p, next, now, keys, fields)
	ups := make([]metadata.RowUpdate, len(keys))
	for i, k := range keys {
		f := map[string]metadata.FieldInfo{}
		for name, g := range res[i].Gens {
			f[name] = metadata.FieldInfo{Gen: g, BackendTag: "bt-" + name}
		}
		ups[i] = metadata.RowUpdate{Key: k, Index: res[i].Index, Fields: f, Tag: tag}
	}
	if _, err := p.Commit(now, ups); err != nil {
		t.Fatal(err)
	}
}

// DeleteFields takes the fields' cells out of the rows and makes them
// garbage, in the order it returns them; the rows keep their other
// fields and their tag, a row left with no field stays, and unknown keys
// and fields a row lacks are ignored.
func TestDeleteFieldsKeepsRows(t *testing.T) {
	p := New()
	var next uint64
	putAll(t, p, &next, 1, []string{"k0", "k1"}, []string{"a", "b"}, map[string]any{"s": int64(1)})
	putAll(t, p, &next, 2, []string{"k2"}, []string{"b"}, nil)
	before := p.Lookup([]string{"k0"})[0]

	got := p.DeleteFields(3, []string{"k1", "nope", "k0", "k2"}, []string{"b", "a", "zz", "b"})
	want := []metadata.Ref{
		{Index: 1, Field: "a", Gen: 0, Tag: "bt-a"}, {Index: 1, Field: "b", Gen: 0, Tag: "bt-b"},
		{Index: 0, Field: "a", Gen: 0, Tag: "bt-a"}, {Index: 0, Field: "b", Gen: 0, Tag: "bt-b"},
		{Index: 2, Field: "b", Gen: 0, Tag: "bt-b"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("DeleteFields returned %v, want %v", got, want)
	}
	if !slices.Equal(p.Garbage(), want) {
		t.Fatalf("garbage %v, want %v", p.Garbage(), want)
	}
	rows := p.Lookup([]string{"k0", "k1", "k2"})
	for i, r := range rows {
		if r == nil || len(r.Fields) != 0 || r.Fields == nil {
			t.Fatalf("row %d after its every field went: %+v, want a row with an empty field table", i, r)
		}
	}
	if rows[0].Tag["s"] != int64(1) {
		t.Fatalf("k0's tag %v, want it kept", rows[0].Tag)
	}
	if len(before.Fields) != 2 {
		t.Fatalf("the row a reader held changed: %v", before.Fields)
	}
	if len(p.List()) != 3 || p.Committed() != 3 {
		t.Fatalf("List %d rows, %d committed; want 3", len(p.List()), p.Committed())
	}
	if p.DeleteFields(4, []string{"k0"}, []string{"a"}) != nil {
		t.Fatal("a second DeleteFields of the same field found cells")
	}

	p.Swept(5, got)
	if len(p.Garbage()) != 0 {
		t.Fatalf("garbage after Swept of what DeleteFields returned: %v", p.Garbage())
	}
	// A row with no field snapshots and restores as such.
	snap, err := p.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	q, err := Restore(snap)
	if err != nil {
		t.Fatal(err)
	}
	if r := q.Lookup([]string{"k2"})[0]; r == nil || len(r.Fields) != 0 {
		t.Fatalf("restored row with no field: %+v", r)
	}
	// A put gives a cleared field back, at a new generation.
	putAll(t, p, &next, 6, []string{"k0"}, []string{"a"}, nil)
	if fi, ok := p.Lookup([]string{"k0"})[0].Fields["a"]; !ok || fi.Gen != 1 {
		t.Fatalf("k0.a after a put: %+v %v, want generation 1", fi, ok)
	}
}

// A put of a field prepared before the field was removed fails its
// Commit with a conflict (not a lost reservation), applying nothing; its
// cell is an orphan, which its Abandon and an Abort find. A put of
// another field of the row is untouched.
func TestDeleteFieldsAbortsPendingPuts(t *testing.T) {
	p := New()
	var next uint64
	putAll(t, p, &next, 1, []string{"k"}, []string{"a", "b"}, nil)
	ra := prepare(t, p, &next, 2, []string{"k"}, []string{"a"})[0]
	rb := prepare(t, p, &next, 2, []string{"k"}, []string{"b"})[0]
	p.DeleteFields(3, []string{"k"}, []string{"a"})
	err := commitOne(p, 4, "k", ra)
	if !errors.Is(err, backends.ErrConflict) || errors.Is(err, backends.ErrReservationLost) {
		t.Fatalf("Commit of a reservation of a removed field: %v, want ErrConflict only", err)
	}
	if _, ok := p.Lookup([]string{"k"})[0].Fields["a"]; ok {
		t.Fatal("a refused commit brought the field back")
	}
	if err := commitOne(p, 4, "k", rb); err != nil {
		t.Fatalf("Commit of another field of the row: %v", err)
	}
	if p.pending != 0 {
		t.Fatalf("%d reservations pending, want 0", p.pending)
	}
	cell := metadata.Ref{Index: ra.Index, Field: "a", Gen: ra.Gens["a"]}
	if n := p.Abandon(5, []metadata.Ref{cell}); n != 0 {
		t.Fatalf("Abandon of the aborted reservation: %d unknown, want 0", n)
	}
	if !slices.ContainsFunc(p.Garbage(), func(r metadata.Ref) bool { return sameCell(r, cell) }) {
		t.Fatalf("the abandoned reservation is not garbage: %v", p.Garbage())
	}

	// Unabandoned, an Abort finds it once old enough.
	rc := prepare(t, p, &next, 10, []string{"k"}, []string{"a"})[0]
	p.DeleteFields(11, []string{"k"}, []string{"a"})
	late := metadata.Ref{Index: rc.Index, Field: "a", Gen: rc.Gens["a"]}
	has := func() bool {
		return slices.ContainsFunc(p.Garbage(), func(r metadata.Ref) bool { return sameCell(r, late) })
	}
	if p.Abort(12, 9); has() {
		t.Fatal("an orphan younger than the cutoff became garbage")
	}
	if p.Abort(12, 10); !has() {
		t.Fatal("an orphan as old as the cutoff did not become garbage")
	}
}

// A row that loses a field a task needs is no longer ready for it (nor
// in its groups); a leased one keeps its lease, may be acked, and a
// Nacked one waits for the field until a put brings it back.
func TestDeleteFieldsConsumption(t *testing.T) {
	p := New()
	var next uint64
	keys := []string{"k0", "k1", "k2", "k3"}
	putAll(t, p, &next, 1, keys, []string{"a", "b"}, map[string]any{"uid": "g"})
	sel := Select{Fields: []string{"a"}}
	grp := Select{Fields: []string{"a"}, Group: Group{Tag: "uid", Size: 2}}
	c := p.Claim(2, &ClaimArgs{Task: "t", Token: "L", Lease: time.Hour, Rows: 2, Min: 1, Select: sel})
	if len(c.Rows) != 2 {
		t.Fatalf("claimed %d rows, want 2", len(c.Rows))
	}
	if got := p.Ready("t"); got != 2 {
		t.Fatalf("ready %d, want 2", got)
	}
	p.Claim(2, &ClaimArgs{Task: "g", Token: "G0", Lease: time.Hour, Rows: 2, Min: 3, Select: grp}) // builds the index, leases nothing
	p.Claim(2, &ClaimArgs{Task: "other", Token: "O0", Lease: time.Hour, Rows: 4, Min: 5, Select: Select{Fields: []string{"b"}}})

	// k0 leased, k2 ready: both lose a.
	p.DeleteFields(3, []string{"k0", "k2"}, []string{"a"})
	checkIndex(t, p, "after DeleteFields")
	if got := p.Ready("t"); got != 1 {
		t.Fatalf("ready after k2 lost a: %d, want 1 (k3)", got)
	}
	if got := p.Ready("other"); got != 4 {
		t.Fatalf("a task on b: ready %d, want 4", got)
	}
	if got := p.Ready("g"); got != 2 {
		t.Fatalf("group task: ready %d, want 2", got)
	}
	g := p.Claim(4, &ClaimArgs{Task: "g", Token: "G1", Lease: time.Hour, Rows: 4, Min: 2, Select: grp})
	if len(g.Rows) != 2 || g.Rows[0].Key != "k1" || g.Rows[1].Key != "k3" {
		t.Fatalf("group claim after DeleteFields: %v, want k1 k3", keysOfRows(g.Rows))
	}
	ds := p.Consumption(4, "t")["t"]
	if len(ds) != 2 || ds[0].State != metadata.Leased || ds[0].Lease != "L" {
		t.Fatalf("k0's lease after it lost a: %+v", ds)
	}
	res := p.Settle(5, &SettleArgs{Task: "t", Op: metadata.Nack, Lease: "L", Indexes: []uint64{c.Rows[0].Index}})
	if len(res.Lost) != 0 {
		t.Fatalf("Nack of a leased row that lost a field: lost %v", res.Lost)
	}
	if got := p.Ready("t"); got != 1 {
		t.Fatalf("ready after a Nack of a row without the field: %d, want 1", got)
	}
	res = p.Settle(5, &SettleArgs{Task: "t", Op: metadata.Ack, Lease: "L", Indexes: []uint64{c.Rows[1].Index}})
	if len(res.Lost) != 0 {
		t.Fatalf("Ack of k1: lost %v", res.Lost)
	}
	putAll(t, p, &next, 6, []string{"k0", "k2"}, []string{"a"}, nil)
	checkIndex(t, p, "after the put")
	if got := p.Ready("t"); got != 3 {
		t.Fatalf("ready once a is back: %d, want 3 (k0 returned, k2, k3)", got)
	}
}

func keysOfRows(rows []*metadata.Row) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.Key
	}
	return out
}

// Applied from a record, DeleteFields gives its writer the cells, and a
// copy that replays it the same state.
func TestDeleteFieldsRecord(t *testing.T) {
	p, q := New(), New()
	rec, err := CommitRecord([]metadata.RowUpdate{{Key: "k", Index: 0, Fields: map[string]metadata.FieldInfo{"a": {}, "b": {Gen: 0}}}})
	if err != nil {
		t.Fatal(err)
	}
	for i, data := range [][]byte{PrepareRecord([]string{"k"}, []string{"a", "b"}, nil, 1), rec} {
		e := &backends.Entry{N: uint64(i + 1), ID: uint64(i + 1), Time: 1, Data: data}
		if r := p.Apply(e); r.Err != nil {
			t.Fatal(r.Err)
		}
		q.Replay(e)
	}
	e := &backends.Entry{N: 3, ID: 3, Time: 2, Data: DeleteFieldsRecord([]string{"k"}, []string{"a"})}
	r := p.Apply(e)
	q.Replay(e)
	if r.Err != nil || r.Kind != KindFields || len(r.Cells) != 1 || r.Cells[0].Field != "a" {
		t.Fatalf("applied: %+v", r)
	}
	if !slices.Equal(snapOf(p), snapOf(q)) {
		t.Fatal("a replaying copy holds another state")
	}
	if bad := p.Apply(&backends.Entry{N: 4, ID: 4, Time: 3, Data: []byte{KindFields, 0x91}}); !errors.Is(bad.Err, ErrCorrupt) {
		t.Fatalf("a truncated record: %v, want ErrCorrupt", bad.Err)
	}
}
