package memory

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/tqgo/tqgo/backends"
)

func smallCells(prefix string, n, size int) []backends.Cell {
	cells := make([]backends.Cell, n)
	for i := range cells {
		cells[i].Key = fmt.Sprint(prefix, i)
		cells[i].Body = bytes.Repeat([]byte{byte(i)}, size)
	}
	return cells
}

// TestArenasReused: the arenas of deleted values go to the free list and
// the next Write takes them from there before allocating; a value still
// stored keeps its arena off the list.
func TestArenasReused(t *testing.T) {
	ctx := t.Context()
	s := New()
	a := smallCells("a", 3*arenaSize/1024, 1024) // three arenas
	if err := s.Write(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, a[1:]); err != nil {
		t.Fatal(err)
	}
	if got := s.free.bytes; got != 2*arenaSize {
		t.Fatalf("after deleting all but the first value: %d free bytes, want the two arenas it is not in (%d)", got, 2*arenaSize)
	}
	b := smallCells("b", arenaSize/1024, 1024)
	if err := s.Write(ctx, b); err != nil {
		t.Fatal(err)
	}
	if got := s.free.bytes; got != arenaSize {
		t.Fatalf("after a write of one arena: %d free bytes, want %d (one arena reused)", got, arenaSize)
	}
	// Overwriting the last value of the first arena (with a large value,
	// which takes no arena) frees it.
	if err := s.Write(ctx, smallCells("a", 1, smallObject)); err != nil {
		t.Fatal(err)
	}
	if got := s.free.bytes; got != 2*arenaSize {
		t.Fatalf("after overwriting the first arena's last value: %d free bytes, want %d", got, 2*arenaSize)
	}
	for i, c := range b {
		r := []backends.ReadCell{{Key: c.Key}}
		if err := s.Read(ctx, r); err != nil || !bytes.Equal(r[0].Value, c.Body) {
			t.Fatalf("value %d of the write into reused memory: %v, err %v", i, r[0].Value, err)
		}
	}
}

// TestFreeListBound: the free list keeps at most maxFree bytes and no
// arena smaller than a large value.
func TestFreeListBound(t *testing.T) {
	var f freeList
	for range 2 * maxFree / arenaSize {
		f.put(&chunk{buf: make([]byte, arenaSize)})
	}
	if f.bytes != maxFree || len(f.chunks) != maxFree/arenaSize {
		t.Errorf("free list of %d arenas, %d bytes; want at most %d bytes", len(f.chunks), f.bytes, maxFree)
	}
	var g freeList
	g.put(&chunk{buf: make([]byte, smallObject-1)})
	if g.bytes != 0 {
		t.Errorf("an arena under %d bytes was kept", smallObject)
	}
}
