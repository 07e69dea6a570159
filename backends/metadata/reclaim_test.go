package metadata

import (
	"slices"
	"testing"
)

// AppendRowRefs gives every cell of every row, row by row and by field
// within a row, with each row's own index, gens and tags, whether rows
// share their Fields map or not.
func TestAppendRowRefs(t *testing.T) {
	shared := map[string]FieldInfo{"b": {Gen: 2, BackendTag: "tb"}, "a": {Gen: 1}, "c": {Gen: 3}}
	rows := []*Row{
		{Index: 7, Fields: shared},
		{Index: 3, Fields: shared},
		{Index: 9, Fields: map[string]FieldInfo{"z": {Gen: 4}, "y": {Gen: 5, BackendTag: "ty"}}},
		{Index: 1},
		{Index: 5, Fields: shared},
	}
	prefix := []Ref{{Index: 100, Field: "q"}}
	got := AppendRowRefs(slices.Clone(prefix), rows)
	want := append(prefix,
		Ref{Index: 7, Field: "a", Gen: 1}, Ref{Index: 7, Field: "b", Gen: 2, Tag: "tb"}, Ref{Index: 7, Field: "c", Gen: 3},
		Ref{Index: 3, Field: "a", Gen: 1}, Ref{Index: 3, Field: "b", Gen: 2, Tag: "tb"}, Ref{Index: 3, Field: "c", Gen: 3},
		Ref{Index: 9, Field: "y", Gen: 5, Tag: "ty"}, Ref{Index: 9, Field: "z", Gen: 4},
		Ref{Index: 5, Field: "a", Gen: 1}, Ref{Index: 5, Field: "b", Gen: 2, Tag: "tb"}, Ref{Index: 5, Field: "c", Gen: 3},
	)
	if !slices.Equal(got, want) {
		t.Errorf("AppendRowRefs =\n%v\nwant\n%v", got, want)
	}
}
