package tq

import (
	"errors"
	"testing"

	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/codec"
)

// cellCheckRows are n rows of field "f" as a jagged put leaves them: each
// row its own Fields map (their shapes differ), so the check reads the
// metadata of every row.
func cellCheckRows(n int) ([]*metadata.Row, Column) {
	rows := make([]*metadata.Row, n)
	ts := make([]codec.Tensor, n)
	for i := range rows {
		shape := []int64{int64(i%5 + 1)}
		rows[i] = &metadata.Row{Key: "k", Index: uint64(i), Fields: map[string]metadata.FieldInfo{"f": {DType: "int64", Shape: shape}}}
		ts[i] = codec.Tensor{DType: codec.Int64, Shape: []int64{int64(i%5 + 1)}, Data: make([]byte, 8*(i%5+1))}
	}
	return rows, Column{kind: KindJagged, tensors: ts}
}

// Checking cells that are what the metadata says allocates nothing, per
// cell or otherwise; a cell that differs is found.
func TestCheckColumnAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	rows, col := cellCheckRows(200)
	vals := make([]any, len(col.tensors))
	for i, x := range col.tensors {
		vals[i] = x
	}
	values := Column{kind: KindValues, values: vals}
	for name, c := range map[string]Column{"jagged": col, "values": values} {
		if err := checkColumn("p", rows, "f", c); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if n := testing.AllocsPerRun(20, func() { _ = checkColumn("p", rows, "f", c) }); n != 0 {
			t.Errorf("%s: checking %d matching cells made %v allocations, want 0", name, len(rows), n)
		}
	}
	col.tensors[150].Shape = []int64{9}
	err := checkColumn("p", rows, "f", col)
	var ke *KeyError
	if !errors.As(err, &ke) || !errors.Is(err, codec.ErrCorrupt) || ke.Field != "f" {
		t.Fatalf("a cell of another shape: %v, want a KeyError matching codec.ErrCorrupt", err)
	}
}
