package metadata

import (
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// TestMergerMatchesMergeRow: a Merger gives the rows and cells MergeRow
// gives, over commits whose rows share maps as tq's do, and shares the maps
// it may.
func TestMergerMatchesMergeRow(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	fieldsOf := func() map[string]FieldInfo {
		if rng.IntN(5) == 0 {
			return nil
		}
		out := map[string]FieldInfo{}
		for _, f := range []string{"a", "b", "c"} {
			if rng.IntN(2) == 0 {
				out[f] = FieldInfo{DType: "int64", Shape: []int64{2}, Gen: uint64(rng.IntN(3)), BackendTag: fmt.Sprint(rng.IntN(2))}
			}
		}
		return out
	}
	tagOf := func() map[string]any {
		if rng.IntN(2) == 0 {
			return nil
		}
		return map[string]any{"step": int64(rng.IntN(3))}
	}
	for range 2000 {
		n := 1 + rng.IntN(6)
		curs := make([]*Row, n)
		ups := make([]RowUpdate, n)
		for i := range n {
			// Runs of rows share their committed and updated maps.
			if i > 0 && rng.IntN(3) > 0 {
				if prev := curs[i-1]; prev != nil {
					curs[i] = &Row{Key: fmt.Sprint(i), Index: uint64(i), Fields: prev.Fields, Tag: tagOf()}
				}
				ups[i] = RowUpdate{Key: fmt.Sprint(i), Index: uint64(i), Fields: ups[i-1].Fields, Tag: tagOf()}
				continue
			}
			if rng.IntN(3) > 0 {
				curs[i] = &Row{Key: fmt.Sprint(i), Index: uint64(i), Fields: fieldsOf(), Tag: tagOf()}
			}
			ups[i] = RowUpdate{Key: fmt.Sprint(i), Index: uint64(i), Fields: fieldsOf(), Tag: tagOf()}
		}
		var before struct {
			curs []*Row
			ups  []RowUpdate
		}
		for i := range n {
			before.ups = append(before.ups, RowUpdate{Key: ups[i].Key, Index: ups[i].Index, Fields: maps.Clone(ups[i].Fields), Tag: maps.Clone(ups[i].Tag)})
			var c *Row
			if curs[i] != nil {
				c = &Row{Key: curs[i].Key, Index: curs[i].Index, Fields: maps.Clone(curs[i].Fields), Tag: maps.Clone(curs[i].Tag)}
			}
			before.curs = append(before.curs, c)
		}
		var want, got CommitResult
		var m Merger
		for i := range n {
			w := MergeRow(curs[i], &ups[i], &want)
			var g Row
			m.Merge(&g, curs[i], &ups[i], &got)
			if !reflect.DeepEqual(&g, w) {
				t.Fatalf("row %d of %v onto %v: Merge = %+v, MergeRow = %+v", i, ups[i], curs[i], g, *w)
			}
			// Merging into an existing tag makes a map of its own (the
			// row's and the update's stay as they are, checked below).
			if ups[i].Tag != nil && curs[i] != nil && len(curs[i].Tag) > 0 && (SameMap(g.Tag, ups[i].Tag) || SameMap(g.Tag, curs[i].Tag)) {
				t.Fatalf("row %d: Merge merged two tags into one of them", i)
			}
		}
		if !reflect.DeepEqual(curs, before.curs) || !reflect.DeepEqual(ups, before.ups) {
			t.Fatal("Merge modified a row or update it was given")
		}
		byCell := func(a, b Ref) int {
			return cmp.Or(cmp.Compare(a.Index, b.Index), cmp.Compare(a.Field, b.Field), cmp.Compare(a.Gen, b.Gen))
		}
		for _, r := range []*CommitResult{&want, &got} {
			slices.SortFunc(r.Stale, byCell)
			slices.SortFunc(r.Superseded, byCell)
		}
		if !slices.Equal(want.Stale, got.Stale) || !slices.Equal(want.Superseded, got.Superseded) {
			t.Fatalf("cells: Merge %+v, MergeRow %+v", got, want)
		}
	}
}

// TestMergerShares: rows of a batch with one Fields map share the merged map.
func TestMergerShares(t *testing.T) {
	committed := map[string]FieldInfo{"a": {Gen: 0}}
	update := map[string]FieldInfo{"a": {Gen: 1}, "b": {Gen: 0}}
	var m Merger
	var res CommitResult
	rows := make([]Row, 3)
	for i := range rows {
		m.Merge(&rows[i], &Row{Key: fmt.Sprint(i), Index: uint64(i), Fields: committed}, &RowUpdate{Key: fmt.Sprint(i), Index: uint64(i), Fields: update}, &res)
	}
	if !SameMap(rows[0].Fields, rows[2].Fields) || SameMap(rows[0].Fields, committed) || SameMap(rows[0].Fields, update) {
		t.Fatal("rows merging the same maps do not share one new map")
	}
	if len(res.Superseded) != 3 || res.Superseded[2] != (Ref{Index: 2, Field: "a"}) {
		t.Fatalf("superseded = %+v", res.Superseded)
	}
	var first Row
	m.Merge(&first, nil, &RowUpdate{Key: "n", Index: 9, Fields: update}, &res)
	if !SameMap(first.Fields, update) {
		t.Fatal("a first commit copied the update's map")
	}
	if len(committed) != 1 || len(update) != 2 {
		t.Fatal("Merge modified a map it was given")
	}
	// In place.
	row := Row{Key: "k", Index: 5, Fields: committed, Tag: map[string]any{"s": "a"}}
	new(Merger).Merge(&row, &row, &RowUpdate{Key: "k", Index: 5, Fields: update}, &res)
	if len(row.Fields) != 2 || row.Fields["a"].Gen != 1 || row.Tag["s"] != "a" {
		t.Fatalf("merged in place: %+v", row)
	}
}
