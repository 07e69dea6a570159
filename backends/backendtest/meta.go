package backendtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
)

// RunMeta checks that the stores newMeta returns keep the metadata
// contract (see the package doc and metadata.MetaStore), one subtest per
// rule, each on a fresh store from newMeta.
func RunMeta(t *testing.T, newMeta func(t *testing.T) metadata.MetaStore) {
	t.Helper()
	nonce := newNonce()
	for _, tc := range metaTests {
		t.Run(tc.name, func(t *testing.T) {
			m := newMeta(t)
			if m == nil {
				t.Fatal("newMeta returned nil")
			}
			tc.fn(&mt{t: t, ctx: t.Context(), m: m, prefix: prefix(nonce, t)})
		})
	}
	t.Run("Reclaim", func(t *testing.T) {
		for _, tc := range reclaimTests {
			t.Run(tc.name, func(t *testing.T) {
				m := newMeta(t)
				if m == nil {
					t.Fatal("newMeta returned nil")
				}
				tc.fn(&rt{mt: &mt{t: t, ctx: t.Context(), m: m, prefix: prefix(nonce, t)}, r: m})
			})
		}
	})
}

var metaTests = []struct {
	name string
	fn   func(*mt)
}{
	{"PrepareIndexes", testPrepareIndexes},
	{"PrepareBadSizes", testPrepareBadSizes},
	{"NewIndexAfterDelete", testNewIndexAfterDelete},
	{"Generations", testGenerations},
	{"EmptyCalls", testMetaEmpty},
	{"UncommittedInvisible", testUncommitted},
	{"CommitVisible", testCommitVisible},
	{"FieldsMerge", testFieldsMerge},
	{"TagMerge", testTagMerge},
	{"Superseded", testSuperseded},
	{"Stale", testStale},
	{"ConflictAfterDelete", testConflictAfterDelete},
	{"ConflictAfterDeletePartition", testConflictAfterDeletePartition},
	{"ConflictReindexed", testConflictReindexed},
	{"Unknown", testMetaUnknown},
	{"Delete", testMetaDelete},
	{"DeletePartition", testDeletePartition},
	{"Partitions", testPartitions},
	{"RoundTrip", testRoundTrip},
	{"ConcurrentSameKeys", testConcurrentSameKeys},
	{"ConcurrentPartitions", testConcurrentPartitions},
	{"Closed", testMetaClosed},
	{"Blocks", testBlocks},
}

// mt is one metadata subtest: its store and its partition prefix.
type mt struct {
	t      *testing.T
	ctx    context.Context
	m      metadata.MetaStore
	prefix string
}

// part returns the partition called name in this subtest.
func (x *mt) part(name string) string { return x.prefix + name }

func (x *mt) prepare(p string, keys, fields []string) []metadata.Reservation {
	x.t.Helper()
	res, err := x.m.Prepare(x.ctx, p, keys, fields, nil)
	if err != nil {
		x.t.Fatalf("Prepare(%q, %q, %q): %v", p, keys, fields, err)
	}
	if len(res) != len(keys) {
		x.t.Fatalf("Prepare of %d keys returned %d reservations", len(keys), len(res))
	}
	for i, r := range res {
		if len(r.Gens) != len(fields) {
			x.t.Fatalf("Prepare of %d fields: key %q reserved %d generations (%v)", len(fields), keys[i], len(r.Gens), r.Gens)
		}
		for _, f := range fields {
			if _, ok := r.Gens[f]; !ok {
				x.t.Fatalf("Prepare: key %q reserved no generation for field %q", keys[i], f)
			}
		}
	}
	return res
}

func (x *mt) commit(p string, ups ...metadata.RowUpdate) metadata.CommitResult {
	x.t.Helper()
	res, err := x.m.Commit(x.ctx, p, ups)
	if err != nil {
		x.t.Fatalf("Commit of %d rows to %q: %v", len(ups), p, err)
	}
	return res
}

func (x *mt) lookup(p string, keys ...string) []*metadata.Row {
	x.t.Helper()
	rows, err := x.m.Lookup(x.ctx, p, keys)
	if err != nil {
		x.t.Fatalf("Lookup(%q, %q): %v", p, keys, err)
	}
	if len(rows) != len(keys) {
		x.t.Fatalf("Lookup of %d keys returned %d rows", len(keys), len(rows))
	}
	return rows
}

func (x *mt) list(p string) []*metadata.Row {
	x.t.Helper()
	rows, err := x.m.List(x.ctx, p)
	if err != nil {
		x.t.Fatalf("List(%q): %v", p, err)
	}
	return rows
}

// partitions returns this subtest's partitions, checking that the whole
// list is sorted.
func (x *mt) partitions() []string {
	x.t.Helper()
	all, err := x.m.Partitions(x.ctx)
	if err != nil {
		x.t.Fatalf("Partitions: %v", err)
	}
	if !slices.IsSorted(all) {
		x.t.Errorf("Partitions not sorted: %q", all)
	}
	var ours []string
	for _, p := range all {
		if strings.HasPrefix(p, x.prefix) {
			ours = append(ours, p)
		}
	}
	return ours
}

func (x *mt) delete(p string, keys ...string) []*metadata.Row {
	x.t.Helper()
	rows, err := x.m.Delete(x.ctx, p, keys)
	if err != nil {
		x.t.Fatalf("Delete(%q, %q): %v", p, keys, err)
	}
	return rows
}

func (x *mt) deletePartition(p string) []*metadata.Row {
	x.t.Helper()
	rows, err := x.m.DeletePartition(x.ctx, p)
	if err != nil {
		x.t.Fatalf("DeletePartition(%q): %v", p, err)
	}
	return rows
}

// wantRows checks rows, in any order when sorted is false, against want.
func (x *mt) wantRows(what string, got, want []*metadata.Row, ordered bool) {
	x.t.Helper()
	if !ordered {
		byIndex := func(a, b *metadata.Row) int {
			if a == nil || b == nil {
				return 0
			}
			return cmp.Compare(a.Index, b.Index)
		}
		got, want = slices.Clone(got), slices.Clone(want)
		slices.SortStableFunc(got, byIndex)
		slices.SortStableFunc(want, byIndex)
	}
	if len(got) != len(want) {
		x.t.Errorf("%s: got %d rows %s, want %d %s", what, len(got), rowKeys(got), len(want), rowKeys(want))
		return
	}
	for i := range want {
		if d := rowDiff(got[i], want[i]); d != "" {
			x.t.Errorf("%s: row %d: %s", what, i, d)
		}
	}
}

func rowKeys(rows []*metadata.Row) string {
	keys := make([]string, len(rows))
	for i, r := range rows {
		if r == nil {
			keys[i] = "<nil>"
		} else {
			keys[i] = fmt.Sprintf("%s(%d)", r.Key, r.Index)
		}
	}
	return "[" + strings.Join(keys, " ") + "]"
}

// rowDiff describes how got differs from want, or returns "". A nil and an
// empty Shape, Fields or Tag are equal; tag values must match in type.
func rowDiff(got, want *metadata.Row) string {
	switch {
	case got == nil && want == nil:
		return ""
	case got == nil:
		return fmt.Sprintf("got nil, want row %q", want.Key)
	case want == nil:
		return fmt.Sprintf("got row %q (index %d), want nil", got.Key, got.Index)
	}
	var diffs []string
	if got.Key != want.Key || got.Index != want.Index {
		diffs = append(diffs, fmt.Sprintf("key, index = %q, %d; want %q, %d", got.Key, got.Index, want.Key, want.Index))
	}
	for f, w := range want.Fields {
		g, ok := got.Fields[f]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("field %q missing", f))
		case g.DType != w.DType || !slices.Equal(g.Shape, w.Shape) || g.Gen != w.Gen || g.BackendTag != w.BackendTag:
			diffs = append(diffs, fmt.Sprintf("field %q = %+v, want %+v", f, g, w))
		}
	}
	for f := range got.Fields {
		if _, ok := want.Fields[f]; !ok {
			diffs = append(diffs, fmt.Sprintf("unexpected field %q", f))
		}
	}
	for k, w := range want.Tag {
		g, ok := got.Tag[k]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("tag %q missing", k))
		case reflect.TypeOf(g) != reflect.TypeOf(w) || !reflect.DeepEqual(g, w):
			diffs = append(diffs, fmt.Sprintf("tag %q = %#v (%T), want %#v (%T)", k, g, g, w, w))
		}
	}
	for k := range got.Tag {
		if _, ok := want.Tag[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("unexpected tag %q", k))
		}
	}
	if diffs == nil {
		return ""
	}
	return fmt.Sprintf("row %q: %s", want.Key, strings.Join(diffs, "; "))
}

// wantRefs checks refs, in any order, against want.
func (x *mt) wantRefs(what string, got, want []metadata.Ref) {
	x.t.Helper()
	order := func(a, b metadata.Ref) int {
		return cmp.Or(cmp.Compare(a.Index, b.Index), cmp.Compare(a.Field, b.Field), cmp.Compare(a.Gen, b.Gen))
	}
	got, want = slices.Clone(got), slices.Clone(want)
	slices.SortFunc(got, order)
	slices.SortFunc(want, order)
	if !slices.Equal(got, want) {
		x.t.Errorf("%s = %+v, want %+v", what, got, want)
	}
}

// cell is a FieldInfo of generation gen.
func cell(dtype string, gen uint64, tag string) metadata.FieldInfo {
	return metadata.FieldInfo{DType: dtype, Shape: []int64{2, 3}, Gen: gen, BackendTag: tag}
}

// fields is the Fields of a commit of each field with its reserved
// generation.
func fields(r metadata.Reservation, names ...string) map[string]metadata.FieldInfo {
	out := make(map[string]metadata.FieldInfo, len(names))
	for _, f := range names {
		out[f] = cell("float32", r.Gens[f], "tag-"+f)
	}
	return out
}

func testPrepareIndexes(x *mt) {
	p, q := x.part("p"), x.part("q")
	r1 := x.prepare(p, []string{"a", "b", "c"}, []string{"f"})
	if !(r1[0].Index < r1[1].Index && r1[1].Index < r1[2].Index) {
		x.t.Fatalf("new keys of one Prepare got indexes %d, %d, %d; want increasing", r1[0].Index, r1[1].Index, r1[2].Index)
	}
	r2 := x.prepare(p, []string{"b", "d"}, []string{"f"})
	if r2[0].Index != r1[1].Index {
		x.t.Errorf("Prepare of a prepared key: index %d, want its index %d", r2[0].Index, r1[1].Index)
	}
	if r2[1].Index <= r1[2].Index {
		x.t.Errorf("new key of a later Prepare: index %d, want more than %d", r2[1].Index, r1[2].Index)
	}
	if !r1[0].New || !r1[2].New || r2[0].New || !r2[1].New {
		x.t.Errorf("Reservation.New of a, c, then b, d: %v %v, %v %v; want true true, false true", r1[0].New, r1[2].New, r2[0].New, r2[1].New)
	}
	x.commit(p, metadata.RowUpdate{Key: "b", Index: r2[0].Index, Fields: fields(r2[0], "f")})
	if r3 := x.prepare(p, []string{"b"}, nil); r3[0].Index != r1[1].Index {
		x.t.Errorf("Prepare of a committed key: index %d, want its index %d", r3[0].Index, r1[1].Index)
	}
	// The same key in another partition is another row.
	rq := x.prepare(q, []string{"a"}, nil)
	if rq[0].Index <= r2[1].Index {
		x.t.Errorf("new key in another partition: index %d, want more than %d", rq[0].Index, r2[1].Index)
	}
	r4 := x.prepare(p, []string{"e"}, nil)
	if r4[0].Index <= rq[0].Index {
		x.t.Errorf("new key after a Prepare in another partition: index %d, want more than %d", r4[0].Index, rq[0].Index)
	}
}

func testNewIndexAfterDelete(x *mt) {
	p := x.part("p")
	keys := []string{"a", "b"}
	var last uint64 // the largest index handed out so far, once prev != nil
	check := func(what string, res, prev []metadata.Reservation) {
		x.t.Helper()
		if res[0].Index >= res[1].Index {
			x.t.Errorf("%s: indexes %d, %d; want increasing", what, res[0].Index, res[1].Index)
		}
		for i, r := range res {
			if prev != nil && r.Index <= last {
				x.t.Errorf("%s: key %q got index %d, want a new one above %d", what, keys[i], r.Index, last)
			}
		}
		last = max(last, res[0].Index, res[1].Index)
	}
	r := x.prepare(p, keys, []string{"f"})
	check("first Prepare", r, nil)
	x.commit(p, metadata.RowUpdate{Key: "a", Index: r[0].Index, Fields: fields(r[0], "f")})
	x.delete(p, keys...) // a committed, b only prepared

	r2 := x.prepare(p, keys, []string{"f"})
	check("Prepare after Delete", r2, r)
	x.commit(p, metadata.RowUpdate{Key: "a", Index: r2[0].Index, Fields: fields(r2[0], "f")})
	x.deletePartition(p)

	r3 := x.prepare(p, keys, []string{"f"})
	check("Prepare after DeletePartition", r3, r2)
}

func testGenerations(x *mt) {
	p := x.part("p")
	wantGens := func(what string, r metadata.Reservation, want map[string]uint64) {
		x.t.Helper()
		if !reflectEqualGens(r.Gens, want) {
			x.t.Errorf("%s: generations %v, want %v", what, r.Gens, want)
		}
	}
	r := x.prepare(p, []string{"k1", "k2"}, []string{"f", "g"})
	wantGens("first Prepare, k1", r[0], map[string]uint64{"f": 0, "g": 0})
	wantGens("first Prepare, k2", r[1], map[string]uint64{"f": 0, "g": 0})
	r = x.prepare(p, []string{"k1"}, []string{"f"})
	wantGens("second Prepare of f", r[0], map[string]uint64{"f": 1})
	x.commit(p, metadata.RowUpdate{Key: "k1", Index: r[0].Index, Fields: fields(r[0], "f")})
	r = x.prepare(p, []string{"k1", "k2"}, []string{"g", "h", "f"})
	wantGens("after a commit, k1", r[0], map[string]uint64{"f": 2, "g": 1, "h": 0})
	wantGens("after a commit, k2", r[1], map[string]uint64{"f": 1, "g": 1, "h": 0})
	r = x.prepare(p, []string{"k1"}, nil)
	wantGens("Prepare of no fields", r[0], map[string]uint64{})
	r = x.prepare(p, []string{"k1"}, []string{"h"})
	wantGens("Prepare after one of no fields", r[0], map[string]uint64{"h": 1})
}

func reflectEqualGens(a, b map[string]uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range b {
		if g, ok := a[k]; !ok || g != v {
			return false
		}
	}
	return true
}

func testMetaEmpty(x *mt) {
	p := x.part("p")
	if res := x.prepare(p, nil, []string{"f"}); len(res) != 0 {
		x.t.Errorf("Prepare of no keys: %d reservations", len(res))
	}
	res := x.commit(p)
	if len(res.Superseded)+len(res.Stale) != 0 {
		x.t.Errorf("Commit of no updates = %+v, want empty", res)
	}
	x.lookup(p)
	if rows := x.delete(p); len(rows) != 0 {
		x.t.Errorf("Delete of no keys returned %d rows", len(rows))
	}
	if ps := x.partitions(); len(ps) != 0 {
		x.t.Errorf("Partitions after empty calls: %q, want none", ps)
	}
}

func testUncommitted(x *mt) {
	p := x.part("p")
	r := x.prepare(p, []string{"a", "b"}, []string{"f"})
	x.wantRows("Lookup of prepared rows", x.lookup(p, "a", "b"), []*metadata.Row{nil, nil}, true)
	x.wantRows("List of prepared rows", x.list(p), nil, true)
	if ps := x.partitions(); len(ps) != 0 {
		x.t.Errorf("Partitions with only prepared rows: %q, want none", ps)
	}
	x.commit(p, metadata.RowUpdate{Key: "a", Index: r[0].Index, Fields: fields(r[0], "f")})
	a := &metadata.Row{Key: "a", Index: r[0].Index, Fields: fields(r[0], "f")}
	x.wantRows("Lookup after committing one row", x.lookup(p, "a", "b"), []*metadata.Row{a, nil}, true)
	x.wantRows("List after committing one row", x.list(p), []*metadata.Row{a}, true)
	if ps := x.partitions(); !slices.Equal(ps, []string{p}) {
		x.t.Errorf("Partitions after a commit: %q, want [%q]", ps, p)
	}
}

func testCommitVisible(x *mt) {
	p := x.part("p")
	r := x.prepare(p, []string{"a", "b", "c", "d"}, []string{"x", "y"})
	res := x.commit(p,
		metadata.RowUpdate{Key: "a", Index: r[0].Index, Fields: fields(r[0], "x", "y"), Tag: map[string]any{"score": 0.5}},
	)
	if len(res.Superseded)+len(res.Stale) != 0 {
		x.t.Errorf("first Commit = %+v, want empty", res)
	}
	x.commit(p,
		metadata.RowUpdate{Key: "c", Index: r[2].Index, Fields: fields(r[2], "x")},
		metadata.RowUpdate{Key: "b", Index: r[1].Index, Fields: fields(r[1], "y"), Tag: map[string]any{"step": int64(3)}},
	)
	a := &metadata.Row{Key: "a", Index: r[0].Index, Fields: fields(r[0], "x", "y"), Tag: map[string]any{"score": 0.5}}
	b := &metadata.Row{Key: "b", Index: r[1].Index, Fields: fields(r[1], "y"), Tag: map[string]any{"step": int64(3)}}
	c := &metadata.Row{Key: "c", Index: r[2].Index, Fields: fields(r[2], "x")}
	x.wantRows("Lookup", x.lookup(p, "c", "a", "nope", "d", "b"), []*metadata.Row{c, a, nil, nil, b}, true)
	x.wantRows("List (by index)", x.list(p), []*metadata.Row{a, b, c}, true)
}

func testFieldsMerge(x *mt) {
	p := x.part("p")
	r1 := x.prepare(p, []string{"k"}, []string{"x"})
	x.commit(p, metadata.RowUpdate{Key: "k", Index: r1[0].Index, Fields: fields(r1[0], "x")})
	r2 := x.prepare(p, []string{"k"}, []string{"y"})
	x.commit(p, metadata.RowUpdate{Key: "k", Index: r2[0].Index, Fields: fields(r2[0], "y")})
	want := &metadata.Row{Key: "k", Index: r1[0].Index, Fields: map[string]metadata.FieldInfo{
		"x": cell("float32", 0, "tag-x"),
		"y": cell("float32", 0, "tag-y"),
	}}
	x.wantRows("Lookup after committing two fields apart", x.lookup(p, "k"), []*metadata.Row{want}, true)

	r3 := x.prepare(p, []string{"k"}, []string{"x"})
	newX := metadata.FieldInfo{DType: "int64", Shape: []int64{5}, Gen: r3[0].Gens["x"], BackendTag: "other"}
	x.commit(p, metadata.RowUpdate{Key: "k", Index: r3[0].Index, Fields: map[string]metadata.FieldInfo{"x": newX}})
	want.Fields = map[string]metadata.FieldInfo{"x": newX, "y": cell("float32", 0, "tag-y")}
	x.wantRows("Lookup after rewriting one field", x.lookup(p, "k"), []*metadata.Row{want}, true)
}

func testTagMerge(x *mt) {
	p := x.part("p")
	r := x.prepare(p, []string{"k"}, nil)
	up := func(tag map[string]any) metadata.RowUpdate {
		return metadata.RowUpdate{Key: "k", Index: r[0].Index, Tag: tag}
	}
	want := &metadata.Row{Key: "k", Index: r[0].Index}
	check := func(what string) {
		x.t.Helper()
		x.wantRows(what, x.lookup(p, "k"), []*metadata.Row{want}, true)
	}
	x.commit(p, up(map[string]any{"a": "1", "b": int64(2)}))
	want.Tag = map[string]any{"a": "1", "b": int64(2)}
	check("Lookup after a tag-only commit")
	x.commit(p, up(map[string]any{"b": int64(3), "c": true}))
	want.Tag = map[string]any{"a": "1", "b": int64(3), "c": true}
	check("Lookup after merging a tag")
	x.commit(p, up(nil))
	check("Lookup after a commit with a nil tag")
	x.commit(p, up(map[string]any{}))
	check("Lookup after a commit with an empty tag")
	rf := x.prepare(p, []string{"k"}, []string{"f"})
	x.commit(p, metadata.RowUpdate{Key: "k", Index: r[0].Index, Fields: fields(rf[0], "f")})
	want.Fields = fields(rf[0], "f")
	check("Lookup after a fields-only commit")
}

func testSuperseded(x *mt) {
	p := x.part("p")
	r0 := x.prepare(p, []string{"k"}, []string{"f"})
	res := x.commit(p, metadata.RowUpdate{Key: "k", Index: r0[0].Index, Fields: map[string]metadata.FieldInfo{"f": cell("float32", 0, "t0")}})
	x.wantRefs("Superseded of the first commit", res.Superseded, nil)
	r1 := x.prepare(p, []string{"k"}, []string{"f"})
	res = x.commit(p, metadata.RowUpdate{Key: "k", Index: r1[0].Index, Fields: map[string]metadata.FieldInfo{"f": cell("float16", 1, "t1")}})
	idx := r0[0].Index
	x.wantRefs("Superseded of a newer generation", res.Superseded, []metadata.Ref{{Index: idx, Field: "f", Gen: 0, Tag: "t0"}})
	x.wantRefs("Stale of a newer generation", res.Stale, nil)
	want := &metadata.Row{Key: "k", Index: idx, Fields: map[string]metadata.FieldInfo{"f": cell("float16", 1, "t1")}}
	x.wantRows("Lookup after a newer generation", x.lookup(p, "k"), []*metadata.Row{want}, true)
}

func testStale(x *mt) {
	p := x.part("p")
	r0 := x.prepare(p, []string{"k"}, []string{"f", "g"})
	x.prepare(p, []string{"k"}, []string{"f"}) // reserves generation 1
	idx := r0[0].Index
	res := x.commit(p, metadata.RowUpdate{Key: "k", Index: idx, Fields: map[string]metadata.FieldInfo{"f": cell("new", 1, "t1")}})
	x.wantRefs("Superseded of generation 1 over nothing", res.Superseded, nil)
	x.wantRefs("Stale of generation 1 over nothing", res.Stale, nil)
	// The older write of f lost; its g still lands.
	res = x.commit(p, metadata.RowUpdate{Key: "k", Index: idx, Fields: map[string]metadata.FieldInfo{
		"f": cell("old", 0, "t0"),
		"g": cell("float32", 0, "tg"),
	}})
	x.wantRefs("Stale of an older generation", res.Stale, []metadata.Ref{{Index: idx, Field: "f", Gen: 0, Tag: "t0"}})
	x.wantRefs("Superseded of an older generation", res.Superseded, nil)
	want := &metadata.Row{Key: "k", Index: idx, Fields: map[string]metadata.FieldInfo{
		"f": cell("new", 1, "t1"),
		"g": cell("float32", 0, "tg"),
	}}
	x.wantRows("Lookup after a stale commit", x.lookup(p, "k"), []*metadata.Row{want}, true)
}

// wantConflict checks that Commit of ups fails with ErrConflict.
func (x *mt) wantConflict(what, p string, ups ...metadata.RowUpdate) {
	x.t.Helper()
	_, err := x.m.Commit(x.ctx, p, ups)
	if !errors.Is(err, backends.ErrConflict) {
		x.t.Errorf("%s: Commit error %v, want one wrapping %v", what, err, backends.ErrConflict)
	}
}

func testConflictAfterDelete(x *mt) {
	p := x.part("p")
	r := x.prepare(p, []string{"a", "b", "c"}, []string{"f"})
	x.commit(p,
		metadata.RowUpdate{Key: "a", Index: r[0].Index, Fields: fields(r[0], "f")},
		metadata.RowUpdate{Key: "c", Index: r[2].Index, Fields: fields(r[2], "f")},
	)
	a := &metadata.Row{Key: "a", Index: r[0].Index, Fields: fields(r[0], "f")}
	// b was only prepared, c committed; both deleted before their commit.
	rc := x.prepare(p, []string{"c"}, []string{"f"})
	if rows := x.delete(p, "b", "c"); len(rows) != 1 || rows[0].Key != "c" {
		x.t.Errorf("Delete of a prepared and a committed row returned %s, want [c]", rowKeys(rows))
	}
	ra := x.prepare(p, []string{"a"}, []string{"g"})
	x.wantConflict("Commit of a row deleted before commit, with a valid row", p,
		metadata.RowUpdate{Key: "a", Index: ra[0].Index, Fields: fields(ra[0], "g"), Tag: map[string]any{"x": "y"}},
		metadata.RowUpdate{Key: "b", Index: r[1].Index, Fields: fields(r[1], "f")},
	)
	x.wantConflict("Commit of a committed row deleted before its rewrite's commit", p,
		metadata.RowUpdate{Key: "c", Index: rc[0].Index, Fields: fields(rc[0], "f")},
	)
	x.wantRows("Lookup after conflicting commits", x.lookup(p, "a", "b", "c"), []*metadata.Row{a, nil, nil}, true)
	x.wantRows("List after conflicting commits", x.list(p), []*metadata.Row{a}, true)
}

func testConflictAfterDeletePartition(x *mt) {
	p := x.part("p")
	r := x.prepare(p, []string{"a", "b"}, []string{"f"})
	x.commit(p, metadata.RowUpdate{Key: "a", Index: r[0].Index, Fields: fields(r[0], "f")})
	ra := x.prepare(p, []string{"a"}, []string{"f"})
	x.deletePartition(p)
	rc := x.prepare(p, []string{"c"}, []string{"f"}) // a row created after the clear
	x.wantConflict("Commit after DeletePartition, with a valid row", p,
		metadata.RowUpdate{Key: "c", Index: rc[0].Index, Fields: fields(rc[0], "f")},
		metadata.RowUpdate{Key: "b", Index: r[1].Index, Fields: fields(r[1], "f")},
	)
	x.wantConflict("Commit of a committed row's rewrite after DeletePartition", p,
		metadata.RowUpdate{Key: "a", Index: ra[0].Index, Fields: fields(ra[0], "f")},
	)
	x.wantRows("Lookup after conflicting commits", x.lookup(p, "a", "b", "c"), []*metadata.Row{nil, nil, nil}, true)
	x.wantRows("List after conflicting commits", x.list(p), nil, true)
	if ps := x.partitions(); len(ps) != 0 {
		x.t.Errorf("Partitions after conflicting commits: %q, want none", ps)
	}
}

func testConflictReindexed(x *mt) {
	p, q := x.part("p"), x.part("q")
	r1 := x.prepare(p, []string{"k"}, []string{"f"})
	x.delete(p, "k")
	r2 := x.prepare(p, []string{"k"}, []string{"f"})
	x.wantConflict("Commit with the index of a deleted row", p,
		metadata.RowUpdate{Key: "k", Index: r1[0].Index, Fields: fields(r1[0], "f")})
	x.commit(p, metadata.RowUpdate{Key: "k", Index: r2[0].Index, Fields: fields(r2[0], "f")})
	want := &metadata.Row{Key: "k", Index: r2[0].Index, Fields: fields(r2[0], "f")}
	x.wantRows("Lookup after commit with the new index", x.lookup(p, "k"), []*metadata.Row{want}, true)

	x.wantConflict("Commit of a key never prepared", p,
		metadata.RowUpdate{Key: "ghost", Index: r2[0].Index, Fields: fields(r2[0], "f")})
	rq := x.prepare(q, []string{"other"}, []string{"f"})
	x.wantConflict("Commit of a key prepared in another partition", p,
		metadata.RowUpdate{Key: "other", Index: rq[0].Index, Fields: fields(rq[0], "f")})
	x.wantRows("Lookup after conflicting commits", x.lookup(p, "k", "ghost", "other"), []*metadata.Row{want, nil, nil}, true)
}

func testMetaUnknown(x *mt) {
	none := x.part("none")
	x.wantRows("Lookup in an unknown partition", x.lookup(none, "a", "b"), []*metadata.Row{nil, nil}, true)
	x.wantRows("List of an unknown partition", x.list(none), nil, true)
	x.wantRows("Delete in an unknown partition", x.delete(none, "a"), nil, false)
	x.wantRows("DeletePartition of an unknown partition", x.deletePartition(none), nil, false)
	p := x.part("p")
	r := x.prepare(p, []string{"a"}, []string{"f"})
	x.commit(p, metadata.RowUpdate{Key: "a", Index: r[0].Index, Fields: fields(r[0], "f")})
	x.wantRows("Lookup of an unknown key", x.lookup(p, "zz"), []*metadata.Row{nil}, true)
	x.wantRows("Delete of an unknown key", x.delete(p, "zz"), nil, false)
}

func testMetaDelete(x *mt) {
	p := x.part("p")
	r := x.prepare(p, []string{"a", "b", "c"}, []string{"f"})
	x.commit(p,
		metadata.RowUpdate{Key: "a", Index: r[0].Index, Fields: fields(r[0], "f"), Tag: map[string]any{"n": int64(1)}},
		metadata.RowUpdate{Key: "b", Index: r[1].Index, Fields: fields(r[1], "f")},
	)
	a := &metadata.Row{Key: "a", Index: r[0].Index, Fields: fields(r[0], "f"), Tag: map[string]any{"n": int64(1)}}
	b := &metadata.Row{Key: "b", Index: r[1].Index, Fields: fields(r[1], "f")}
	x.wantRows("Delete of a committed, a prepared and an unknown key", x.delete(p, "a", "c", "zz"), []*metadata.Row{a}, false)
	x.wantRows("Lookup after Delete", x.lookup(p, "a", "b", "c"), []*metadata.Row{nil, b, nil}, true)
	x.wantRows("List after Delete", x.list(p), []*metadata.Row{b}, true)
	x.wantRows("Delete of a deleted key", x.delete(p, "a"), nil, false)
}

func testDeletePartition(x *mt) {
	p, q := x.part("p"), x.part("q")
	r := x.prepare(p, []string{"a", "b", "c"}, []string{"f"})
	x.commit(p,
		metadata.RowUpdate{Key: "a", Index: r[0].Index, Fields: fields(r[0], "f")},
		metadata.RowUpdate{Key: "b", Index: r[1].Index, Fields: fields(r[1], "f")},
	)
	rq := x.prepare(q, []string{"a"}, []string{"f"})
	x.commit(q, metadata.RowUpdate{Key: "a", Index: rq[0].Index, Fields: fields(rq[0], "f")})
	a := &metadata.Row{Key: "a", Index: r[0].Index, Fields: fields(r[0], "f")}
	b := &metadata.Row{Key: "b", Index: r[1].Index, Fields: fields(r[1], "f")}
	qa := &metadata.Row{Key: "a", Index: rq[0].Index, Fields: fields(rq[0], "f")}

	x.wantRows("DeletePartition", x.deletePartition(p), []*metadata.Row{a, b}, false)
	x.wantRows("List after DeletePartition", x.list(p), nil, true)
	x.wantRows("Lookup after DeletePartition", x.lookup(p, "a", "b", "c"), []*metadata.Row{nil, nil, nil}, true)
	x.wantRows("List of another partition", x.list(q), []*metadata.Row{qa}, true)
	if ps := x.partitions(); !slices.Equal(ps, []string{q}) {
		x.t.Errorf("Partitions after DeletePartition: %q, want [%q]", ps, q)
	}
	x.wantRows("DeletePartition again", x.deletePartition(p), nil, false)

	// The partition can be used again.
	r2 := x.prepare(p, []string{"a"}, []string{"f"})
	x.commit(p, metadata.RowUpdate{Key: "a", Index: r2[0].Index, Fields: fields(r2[0], "f")})
	a2 := &metadata.Row{Key: "a", Index: r2[0].Index, Fields: fields(r2[0], "f")}
	x.wantRows("List of a partition used again", x.list(p), []*metadata.Row{a2}, true)
	if ps := x.partitions(); !slices.Equal(ps, []string{p, q}) {
		x.t.Errorf("Partitions after using a partition again: %q, want [%q %q]", ps, p, q)
	}
}

func testPartitions(x *mt) {
	for _, name := range []string{"c", "a", "b", "B", "a-1"} {
		p := x.part(name)
		r := x.prepare(p, []string{"k"}, []string{"f"})
		x.commit(p, metadata.RowUpdate{Key: "k", Index: r[0].Index, Fields: fields(r[0], "f")})
	}
	x.prepare(x.part("d"), []string{"k"}, []string{"f"}) // prepared only
	want := []string{x.part("B"), x.part("a"), x.part("a-1"), x.part("b"), x.part("c")}
	if ps := x.partitions(); !slices.Equal(ps, want) {
		x.t.Errorf("Partitions = %q, want %q", ps, want)
	}
	x.delete(x.part("b"), "k")
	want = slices.DeleteFunc(want, func(p string) bool { return p == x.part("b") })
	if ps := x.partitions(); !slices.Equal(ps, want) {
		x.t.Errorf("Partitions after deleting the only row of one = %q, want %q", ps, want)
	}
}

// roundTripTag holds a value of each tag type that must keep its Go type,
// with the values a JSON or float-only encoding would get wrong.
var roundTripTag = map[string]any{
	"s":       "text",
	"empty":   "",
	"unicode": "héllo, 世界 ✓",
	"json":    `{"a":1}`,
	"true":    true,
	"false":   false,
	"int":     int64(-42),
	"zero":    int64(0),
	"big":     int64(1<<62 + 3), // not representable as a float64
	"min":     int64(math.MinInt64),
	"float":   0.25,
	"whole":   float64(2), // must not come back as an int64
	"tiny":    1e-300,
	"huge":    -1.5e300,
}

func testRoundTrip(x *mt) {
	p := x.part("p")
	x.prepare(p, []string{"k"}, []string{"tensor"}) // so the next generation is 1
	r := x.prepare(p, []string{"k", "other"}, []string{"tensor", "scalar", "object", "big"})
	gen := r[0].Gens
	fi := map[string]metadata.FieldInfo{
		"tensor": {DType: "bfloat16", Shape: []int64{2, 3, 4}, Gen: gen["tensor"], BackendTag: "large"},
		"scalar": {DType: "int64", Shape: []int64{}, Gen: gen["scalar"]},
		"object": {Gen: gen["object"], BackendTag: "small/é:#"},
		"big":    {DType: "float8_e4m3fn", Shape: []int64{1 << 40, 1, 0}, Gen: gen["big"]},
	}
	x.commit(p,
		metadata.RowUpdate{Key: "k", Index: r[0].Index, Fields: fi, Tag: roundTripTag},
		metadata.RowUpdate{Key: "other", Index: r[1].Index, Tag: map[string]any{"only": "tag"}},
	)
	want := &metadata.Row{Key: "k", Index: r[0].Index, Fields: fi, Tag: roundTripTag}
	other := &metadata.Row{Key: "other", Index: r[1].Index, Tag: map[string]any{"only": "tag"}}
	if gen["tensor"] != 1 {
		x.t.Errorf("second Prepare of a field reserved generation %d, want 1", gen["tensor"])
	}
	x.wantRows("Lookup", x.lookup(p, "k", "other"), []*metadata.Row{want, other}, true)
	x.wantRows("List", x.list(p), []*metadata.Row{want, other}, true)
	x.wantRows("Delete", x.delete(p, "k"), []*metadata.Row{want}, false)
	x.wantRows("DeletePartition", x.deletePartition(p), []*metadata.Row{other}, false)
}

// testConcurrentSameKeys has workers prepare and commit one field of the
// same new keys, in batches taken in different orders. Every worker must
// see the same index for a key; the committed generation must end as the
// newest; and every other generation must be reported exactly once, as
// Superseded or Stale.
func testConcurrentSameKeys(x *mt) {
	const (
		workers = 8
		nKeys   = 60
		batch   = 10
	)
	p := x.part("p")
	keys := make([]string, nKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%02d", i)
	}
	type seen struct {
		index  [workers]uint64
		gen    [workers]uint64
		unused []metadata.Ref // Superseded and Stale, from every worker
	}
	var mu sync.Mutex // guards got
	got := make(map[string]*seen, nKeys)
	for _, k := range keys {
		got[k] = new(seen)
	}
	ctx := x.ctx
	worker := func(w int) error {
		nb := nKeys / batch
		for j := range nb {
			b := (j + w) % nb
			ks := keys[b*batch : (b+1)*batch]
			res, err := x.m.Prepare(ctx, p, ks, []string{"f"}, nil)
			if err != nil {
				return err
			}
			if len(res) != len(ks) {
				return fmt.Errorf("Prepare of %d keys returned %d reservations", len(ks), len(res))
			}
			ups := make([]metadata.RowUpdate, len(ks))
			for i, k := range ks {
				ups[i] = metadata.RowUpdate{Key: k, Index: res[i].Index, Fields: map[string]metadata.FieldInfo{
					"f": {DType: "float32", Gen: res[i].Gens["f"], BackendTag: fmt.Sprint(w)},
				}}
			}
			cr, err := x.m.Commit(ctx, p, ups)
			if err != nil {
				return err
			}
			mu.Lock()
			for i, k := range ks {
				got[k].index[w], got[k].gen[w] = res[i].Index, res[i].Gens["f"]
			}
			for _, ref := range slices.Concat(cr.Superseded, cr.Stale) {
				for i, k := range ks {
					if res[i].Index == ref.Index {
						got[k].unused = append(got[k].unused, ref)
					}
				}
			}
			mu.Unlock()
			if _, err := x.m.List(ctx, p); err != nil {
				return err
			}
		}
		return nil
	}
	runWorkers(x.t, workers, worker)
	if x.t.Failed() {
		return
	}

	bad := 0
	errorf := func(format string, args ...any) {
		x.t.Helper()
		if bad++; bad <= 6 {
			x.t.Errorf(format, args...)
		}
	}
	defer func() {
		if bad > 6 {
			x.t.Errorf("... %d errors in all", bad)
		}
	}()
	allGens := make([]uint64, workers)
	for i := range allGens {
		allGens[i] = uint64(i)
	}
	rows := x.lookup(p, keys...)
	indexes := make(map[uint64]string, nKeys)
	for i, k := range keys {
		s := got[k]
		if other, dup := indexes[s.index[0]]; dup {
			errorf("keys %q and %q share index %d", other, k, s.index[0])
		}
		indexes[s.index[0]] = k
		newest := 0
		for w := range workers {
			if s.index[w] != s.index[0] {
				errorf("key %q: worker %d got index %d, worker 0 got %d", k, w, s.index[w], s.index[0])
			}
			if s.gen[w] > s.gen[newest] {
				newest = w
			}
		}
		gens := slices.Sorted(slices.Values(s.gen[:]))
		if !slices.Equal(gens, allGens) {
			errorf("key %q: workers reserved generations %v, want %v", k, gens, allGens)
			continue
		}
		reported := []uint64{s.gen[newest]}
		for _, ref := range s.unused {
			reported = append(reported, ref.Gen)
		}
		slices.Sort(reported)
		if !slices.Equal(reported, allGens) {
			errorf("key %q: the committed generation and those reported Superseded or Stale are %v, want each of %v once", k, reported, allGens)
		}
		if r := rows[i]; r == nil {
			errorf("key %q: not committed", k)
		} else if f := r.Fields["f"]; f.Gen != s.gen[newest] || f.BackendTag != fmt.Sprint(newest) {
			errorf("key %q: committed generation %d of worker %s, want %d of worker %d", k, f.Gen, f.BackendTag, s.gen[newest], newest)
		}
	}
}

// testConcurrentPartitions has workers fill a partition each while reading
// the others: indexes must be distinct across partitions and increase
// within each worker.
func testConcurrentPartitions(x *mt) {
	const (
		workers = 8
		batches = 8
		batch   = 20
	)
	indexes := make([][]uint64, workers)
	ctx := x.ctx
	worker := func(w int) error {
		p := x.part(fmt.Sprint(w))
		for b := range batches {
			keys := make([]string, batch)
			for i := range keys {
				keys[i] = fmt.Sprintf("k%d-%d", b, i)
			}
			res, err := x.m.Prepare(ctx, p, keys, []string{"f"}, nil)
			if err != nil {
				return err
			}
			ups := make([]metadata.RowUpdate, len(keys))
			for i, k := range keys {
				if n := len(indexes[w]); n > 0 && res[i].Index <= indexes[w][n-1] {
					return fmt.Errorf("partition %d: key %q got index %d after %d", w, k, res[i].Index, indexes[w][n-1])
				}
				indexes[w] = append(indexes[w], res[i].Index)
				ups[i] = metadata.RowUpdate{Key: k, Index: res[i].Index, Fields: map[string]metadata.FieldInfo{"f": {Gen: res[i].Gens["f"]}}}
			}
			if _, err := x.m.Commit(ctx, p, ups); err != nil {
				return err
			}
			if _, err := x.m.List(ctx, x.part(fmt.Sprint((w+1)%workers))); err != nil {
				return err
			}
			if _, err := x.m.Partitions(ctx); err != nil {
				return err
			}
		}
		return nil
	}
	runWorkers(x.t, workers, worker)
	if x.t.Failed() {
		return
	}
	seen := make(map[uint64]int, workers*batches*batch)
	for w := range workers {
		for _, i := range indexes[w] {
			if other, dup := seen[i]; dup {
				x.t.Errorf("index %d handed out in partitions %d and %d", i, other, w)
			}
			seen[i] = w
		}
		rows := x.list(x.part(fmt.Sprint(w)))
		if len(rows) != batches*batch {
			x.t.Errorf("partition %d: List returned %d rows, want %d", w, len(rows), batches*batch)
			continue
		}
		for i, r := range rows {
			if r.Index != indexes[w][i] {
				x.t.Errorf("partition %d: List row %d (%q) has index %d, want %d", w, i, r.Key, r.Index, indexes[w][i])
				break
			}
		}
	}
	if ps := x.partitions(); len(ps) != workers {
		x.t.Errorf("Partitions lists %d of this test's partitions, want %d", len(ps), workers)
	}
}

func testMetaClosed(x *mt) {
	p := x.part("p")
	r := x.prepare(p, []string{"k"}, []string{"f"})
	if err := x.m.Close(); err != nil {
		x.t.Fatalf("Close: %v", err)
	}
	want := func(what string, err error) {
		x.t.Helper()
		if !errors.Is(err, backends.ErrClosed) {
			x.t.Errorf("%s after Close: error %v, want one wrapping %v", what, err, backends.ErrClosed)
		}
	}
	_, err := x.m.Prepare(x.ctx, p, []string{"k"}, []string{"f"}, nil)
	want("Prepare", err)
	_, err = x.m.Commit(x.ctx, p, []metadata.RowUpdate{{Key: "k", Index: r[0].Index, Fields: fields(r[0], "f")}})
	want("Commit", err)
	_, err = x.m.Lookup(x.ctx, p, []string{"k"})
	want("Lookup", err)
	_, err = x.m.List(x.ctx, p)
	want("List", err)
	_, err = x.m.Partitions(x.ctx)
	want("Partitions", err)
	_, err = x.m.Delete(x.ctx, p, []string{"k"})
	want("Delete", err)
	_, err = x.m.DeletePartition(x.ctx, p)
	want("DeletePartition", err)
}

// testPrepareBadSizes: sizes that are not one per cell, or negative, are
// refused with ErrInvalid, reserving nothing, bound or no bound.
func testPrepareBadSizes(x *mt) {
	p := x.part("p")
	if _, err := x.m.SetCapacity(x.ctx, p, metadata.Capacity{Bytes: 1000}); err != nil {
		x.t.Fatal(err)
	}
	for _, sizes := range [][]int64{{1}, {1, 2, 3}, {1, -2}} {
		if _, err := x.m.Prepare(x.ctx, p, []string{"a", "b"}, []string{"f"}, sizes); !errors.Is(err, backends.ErrInvalid) {
			x.t.Errorf("Prepare with sizes %v: %v, want ErrInvalid", sizes, err)
		}
	}
	rows, err := x.m.Lookup(x.ctx, p, []string{"a", "b"})
	if err != nil {
		x.t.Fatal(err)
	}
	if rows[0] != nil || rows[1] != nil {
		x.t.Errorf("a refused Prepare left rows: %v", rows)
	}
	r := x.prepare(p, []string{"a"}, []string{"f"})
	if len(r) != 1 {
		x.t.Fatalf("Prepare after refusals: %v", r)
	}
}
