package redis

import (
	"slices"
	"testing"

	"github.com/tqgo/tqgo/backends"
)

// TestReceipts: a commit finds the receipts among its rows' cells (the
// field and generation must match), Delete's forget drops them, and past
// maxReceipts the oldest go first.
func TestReceipts(t *testing.T) {
	var r receipts
	r.add(backends.StorageKey(7, "x", 2))
	r.add(backends.StorageKey(7, "y", 0))
	r.add(backends.StorageKey(9, "x", 0))
	r.add("no-index") // not a storage key: ignored
	updates := []backends.RowUpdate{
		{Key: "a", Index: 7, Fields: map[string]backends.FieldInfo{"x": {Gen: 2}, "y": {Gen: 1}}},
		{Key: "b", Index: 8, Fields: map[string]backends.FieldInfo{"x": {Gen: 0}}},
	}
	if got, want := r.of(updates), []string{backends.StorageKey(7, "x", 2)}; !slices.Equal(got, want) {
		t.Fatalf("receipts of the updates: %v, want %v (y's generation differs, row 8 has none)", got, want)
	}
	r.forget([]string{backends.StorageKey(7, "x", 2)})
	if got := r.of(updates); len(got) != 0 {
		t.Fatalf("after forget: %v, want none", got)
	}
	nine := []backends.RowUpdate{{Key: "c", Index: 9, Fields: map[string]backends.FieldInfo{"x": {}}}}
	for i := range maxReceipts {
		r.add(backends.StorageKey(uint64(100+i), "x", 0))
	}
	if got := r.of(nine); len(got) != 0 {
		t.Fatalf("after %d more receipts the oldest is kept: %v", maxReceipts, got)
	}
	last := []backends.RowUpdate{{Key: "d", Index: uint64(100 + maxReceipts - 1), Fields: map[string]backends.FieldInfo{"x": {}}}}
	if got := r.of(last); len(got) != 1 {
		t.Fatalf("the newest receipt is gone: %v", got)
	}
}
