package file

import (
	"bytes"
	"fmt"
	"testing"
	"unsafe"

	"github.com/tqgo/tqgo/backends"
)

// A put's frame is reused once its cells are gone, and what a reader
// holds never changes under it: a short value handed out whole is a copy,
// a long one pins its frame.
func TestFrameReuse(t *testing.T) {
	eng := openT(t, t.TempDir(), Options{Sync: SyncNever})
	e := engineOf(eng)
	ctx := t.Context()
	put := func(fill byte, big int) []backends.Cell {
		cells := make([]backends.Cell, 64)
		for i := range cells {
			cells[i] = backends.Cell{Key: fmt.Sprintf("k%d", i), Head: []byte{fill}, Body: bytes.Repeat([]byte{fill}, 2000)}
		}
		if big > 0 {
			cells[0].Body = bytes.Repeat([]byte{fill}, big)
		}
		if err := eng.Data.Write(ctx, cells); err != nil {
			t.Fatal(err)
		}
		return cells
	}
	read := func(key string) []byte {
		rc := []backends.ReadCell{{Key: key}}
		if err := eng.Data.Read(ctx, rc); err != nil || !rc[0].Found {
			t.Fatalf("read %s: %v, found %v", key, err, rc[0].Found)
		}
		return rc[0].Value
	}
	frameOf := func(key string) *frameBuf {
		e.mu.RLock()
		defer e.mu.RUnlock()
		return e.st.shard(key)[key].f
	}
	clearAll := func(cells []backends.Cell) {
		if err := eng.Data.Delete(ctx, cells); err != nil {
			t.Fatal(err)
		}
	}

	cells := put(1, 0)
	f := frameOf("k1")
	if f == nil {
		t.Fatal("a 128 KiB write is not in a recycled frame")
	}
	if got := f.refs.Load(); got != 64 {
		t.Fatalf("frame refs %d, want one per cell", got)
	}
	short := read("k1")
	clearAll(cells)
	if got := f.refs.Load(); got != 0 {
		t.Fatalf("frame refs %d after its cells went, want 0", got)
	}
	cells = put(2, 0)
	if frameOf("k1") != f {
		t.Fatal("a write of the same size did not reuse the free frame")
	}
	if !bytes.Equal(short, bytes.Repeat([]byte{1}, 2001)) {
		t.Fatal("a value read before its frame was reused changed")
	}
	if v := read("k1"); !bytes.Equal(v, bytes.Repeat([]byte{2}, 2001)) {
		t.Fatal("the reused frame's value reads wrong")
	}
	clearAll(cells)

	// A long value handed out whole pins its frame.
	cells = put(3, 100<<10)
	g := frameOf("k0")
	long := read("k0")
	if !g.pinned.Load() {
		t.Fatal("a long value handed out did not pin its frame")
	}
	clearAll(cells)
	cells = put(4, 100<<10)
	if frameOf("k0") == g {
		t.Fatal("a pinned frame was reused")
	}
	if !bytes.Equal(long, bytes.Repeat([]byte{3}, 100<<10+1)) {
		t.Fatal("a long value handed out changed")
	}
	// Replaced cells release their frame too, and the log's records do
	// not alias a recycled frame.
	h := frameOf("k0")
	recycled := make([]backends.Cell, 64)
	for i := range recycled {
		recycled[i] = backends.Cell{Key: fmt.Sprintf("k%d", i), Body: bytes.Repeat([]byte{5}, 2000)}
	}
	if _, err := eng.Log.(backends.LogCells).AppendCells(ctx, "p", backends.Pos{}, recycled, []backends.Record{{ID: 1, Indexes: 1, Data: []byte("rec")}}); err != nil {
		t.Fatal(err)
	}
	if got := h.refs.Load(); got != 0 {
		t.Fatalf("refs %d of a frame whose cells were all replaced", got)
	}
	if frameOf("k0") == nil {
		t.Fatal("AppendCells did not build its frame in a recycled allocation")
	}
	lt, err := eng.Log.Read(ctx, "p", backends.Pos{}, 0)
	if err != nil || len(lt.Entries) != 1 || string(lt.Entries[0].Data) != "rec" {
		t.Fatalf("log reads %+v, %v", lt, err)
	}
	f = frameOf("k0")
	lo, hi := uintptr(unsafe.Pointer(&f.buf[0])), uintptr(unsafe.Pointer(&f.buf[len(f.buf)-1]))
	within := func(p unsafe.Pointer) bool { return uintptr(p) >= lo && uintptr(p) <= hi }
	if within(unsafe.Pointer(&lt.Entries[0].Data[0])) {
		t.Error("a log record's data lies in a recycled frame")
	}
	e.mu.RLock()
	for name := range e.st.logs {
		if within(unsafe.Pointer(unsafe.StringData(name))) {
			t.Error("a log's name lies in a recycled frame")
		}
	}
	e.mu.RUnlock()
}
