package tq_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/tqgo/tqgo/backends/memory"
	"github.com/tqgo/tqgo/tq"
)

// TestCachedRowsStaleElsewhere: a client reads keys it read before (from
// rows it cached) while another client sharing the queue changed them; the
// read must show the other client's writes, never the cached cells.
func TestCachedRowsStaleElsewhere(t *testing.T) {
	ctx := t.Context()
	st, meta := memory.New(), memory.NewMetaStore()
	reader := newClient(t, splitMem{st}, meta)
	writer := newClient(t, splitMem{st}, meta)
	keys := []string{"a", "b", "c"}
	get := func(what string, fields ...string) tq.Batch {
		t.Helper()
		b, err := reader.BatchGet(ctx, "p", keys, fields...)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return b
	}
	xs := func(b tq.Batch) []int64 {
		t.Helper()
		v, err := tq.As[int64](b["x"])
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	mustPut(t, writer, "p", keys, tq.Batch{"x": tq.Stacked([]int64{1, 2, 3}, 3)}, nil)
	get("first read") // caches the rows
	if v := xs(get("cached read")); !slices.Equal(v, []int64{1, 2, 3}) {
		t.Fatalf("cached read %v", v)
	}

	// Overwritten elsewhere: new generations.
	mustPut(t, writer, "p", keys, tq.Batch{"x": tq.Stacked([]int64{10, 20, 30}, 3)}, nil)
	if v := xs(get("after an overwrite elsewhere")); !slices.Equal(v, []int64{10, 20, 30}) {
		t.Fatalf("after an overwrite elsewhere: %v, want 10 20 30", v)
	}

	// A column added elsewhere shows in a read of every field.
	mustPut(t, writer, "p", keys, tq.Batch{"y": tq.ValuesOf([]string{"p", "q", "r"})}, nil)
	if b := get("after a column added elsewhere"); b["y"].Len() != 3 {
		t.Fatalf("after a column added elsewhere: fields %v", b.Fields())
	}

	// Cleared and put again elsewhere: new indexes.
	if err := writer.ClearPartition(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	mustPut(t, writer, "p", keys, tq.Batch{"x": tq.Stacked([]int64{7, 8, 9}, 3)}, nil)
	if v := xs(get("after clear and put elsewhere", "x")); !slices.Equal(v, []int64{7, 8, 9}) {
		t.Fatalf("after clear and put elsewhere: %v, want 7 8 9", v)
	}

	// Cleared elsewhere: not found, though the rows are cached.
	if err := writer.Clear(ctx, "p", keys[:1]); err != nil {
		t.Fatal(err)
	}
	if _, err := reader.BatchGet(ctx, "p", keys); !errors.Is(err, tq.ErrNotFound) {
		t.Fatalf("after a clear elsewhere: %v, want ErrNotFound", err)
	}
}
