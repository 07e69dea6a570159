package memory_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/memory"
	"github.com/tqgo/tqgo/internal/uninit"
)

func keys(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

func cellsOf(keys []string) []backends.Cell {
	out := make([]backends.Cell, len(keys))
	for i, k := range keys {
		out[i].Key = k
	}
	return out
}

func stage(t *testing.T, s *memory.Store, keys []string, sizes []int, fill byte) []backends.Cell {
	t.Helper()
	cells := cellsOf(keys)
	if err := s.Stage(t.Context(), cells, sizes); err != nil {
		t.Fatal(err)
	}
	for _, c := range cells {
		for i := range c.Body {
			c.Body[i] = fill
		}
	}
	return cells
}

func readAll(t *testing.T, s *memory.Store, keys []string) []backends.ReadCell {
	t.Helper()
	cells := make([]backends.ReadCell, len(keys))
	for i, k := range keys {
		cells[i].Key = k
	}
	if err := s.Read(t.Context(), cells); err != nil {
		t.Fatal(err)
	}
	return cells
}

// TestStagedBuffersShareNoMemory writes every byte each buffer's capacity
// allows and checks that no other buffer, of the same call or of another
// one, nor an already published value, changed. Small buffers of a call
// share one allocation, so their capacity must end where they do.
func TestStagedBuffersShareNoMemory(t *testing.T) {
	ctx := t.Context()
	s := memory.New()
	sizes := []int{0, 1, 7, 100, 4095, 4096, 70000, 3}
	pub := stage(t, s, keys("pub", len(sizes)), sizes, 0x11)
	if err := s.Write(ctx, pub); err != nil {
		t.Fatal(err)
	}
	a := stage(t, s, keys("a", len(sizes)), sizes, 0xaa)
	b := stage(t, s, keys("b", len(sizes)), sizes, 0xbb)
	for i, c := range a {
		if cap(c.Body) != len(c.Body) {
			t.Errorf("buffer %d: cap %d, len %d: writing up to cap would reach another buffer", i, cap(c.Body), len(c.Body))
		}
	}
	for _, c := range b {
		full := c.Body[:cap(c.Body)]
		for i := range full {
			full[i] = 0xff
		}
	}
	for i, c := range a {
		if !bytes.Equal(c.Body, bytes.Repeat([]byte{0xaa}, sizes[i])) {
			t.Errorf("buffer %d of call a changed by writes to call b", i)
		}
	}
	for i, c := range readAll(t, s, keys("pub", len(sizes))) {
		if !c.Found || !bytes.Equal(c.Value, bytes.Repeat([]byte{0x11}, sizes[i])) {
			t.Errorf("published value %d changed by writes to later calls", i)
		}
	}
	// Within a call: writing one buffer leaves its neighbours alone.
	a[2].Body[len(a[2].Body)-1] = 0
	if a[3].Body[0] != 0xaa || a[1].Body[0] != 0xaa {
		t.Error("writing the last byte of a buffer changed a neighbour")
	}
}

// A staged cell of another store, or one unstaged, is refused and nothing
// of the call is written.
func TestWriteForeignOrUnstaged(t *testing.T) {
	ctx := t.Context()
	s, other := memory.New(), memory.New()
	foreign := stage(t, other, keys("f", 1), []int{3}, 1)
	gone := stage(t, s, keys("g", 1), []int{3}, 2)
	s.Unstage(gone)
	for name, c := range map[string]backends.Cell{"another store's": foreign[0], "an unstaged": gone[0]} {
		cells := append(cellsOf(keys("ok", 2)), c)
		if err := s.Write(ctx, cells); !errors.Is(err, backends.ErrInvalid) {
			t.Errorf("Write of %s cell: %v, want ErrInvalid", name, err)
		}
		if n := s.Len(); n != 0 {
			t.Errorf("Write of %s cell wrote %d keys", name, n)
		}
	}
}

func TestLen(t *testing.T) {
	ctx := t.Context()
	s := memory.New()
	want := func(what string, n int) {
		t.Helper()
		if got := s.Len(); got != n {
			t.Errorf("Len %s = %d, want %d", what, got, n)
		}
	}
	want("of a new store", 0)
	cells := cellsOf(keys("k", 3))
	cells[0].Body, cells[2].Body = []byte{1}, []byte{3}
	if err := s.Write(ctx, cells); err != nil {
		t.Fatal(err)
	}
	want("after Write of 3 keys", 3)
	if err := s.Write(ctx, cells[:2]); err != nil {
		t.Fatal(err)
	}
	want("after overwriting 2", 3)
	if err := s.Delete(ctx, append(cells[:1:1], backends.Cell{Key: "missing"})); err != nil {
		t.Fatal(err)
	}
	want("after Delete of 1 and a missing key", 2)
	st := stage(t, s, keys("s", 4), []int{1, 2, 3, 70000}, 0)
	want("with 4 buffers staged", 2)
	if err := s.Write(ctx, st); err != nil {
		t.Fatal(err)
	}
	want("after Write of 4 staged", 6)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	want("after Close", 0)
}

// TestValueStable checks what Store's doc promises: a Value a reader holds
// never changes under it when its key is rewritten.
func TestValueStable(t *testing.T) {
	ctx := t.Context()
	s := memory.New()
	k := keys("k", 1)
	c := cellsOf(k)
	c[0].Body = []byte("first")
	if err := s.Write(ctx, c); err != nil {
		t.Fatal(err)
	}
	held := readAll(t, s, k)[0].Value
	st := stage(t, s, k, []int{5}, 0)
	copy(st[0].Body, "third")
	c[0].Body = []byte("second")
	if err := s.Write(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, st); err != nil {
		t.Fatal(err)
	}
	if string(held) != "first" {
		t.Errorf("held value changed to %q by later writes", held)
	}
}

// TestHeldValueSurvivesReuse: values read and held, copied from the
// store's arenas or staged into them, stay as they were after their cells
// are deleted and their memory is reused by many later writes and stages.
func TestHeldValueSurvivesReuse(t *testing.T) {
	ctx := t.Context()
	s := memory.New()
	const n = 2000 // of 1000 bytes: two arenas' worth
	fill := func(i int, b byte) []byte { return bytes.Repeat([]byte{b + byte(i)}, 1000) }
	k := keys("held", n)
	c := cellsOf(k[:n/2])
	for i := range c {
		c[i].Head, c[i].Body = []byte("h"), fill(i, 1)[1:]
	}
	if err := s.Write(ctx, c); err != nil {
		t.Fatal(err)
	}
	st := stage(t, s, k[n/2:], slices.Repeat([]int{1000}, n/2), 0)
	for i := range st {
		copy(st[i].Body, fill(n/2+i, 1))
	}
	if err := s.Write(ctx, st); err != nil {
		t.Fatal(err)
	}
	held := readAll(t, s, k)
	want := func(i int) []byte {
		if i < n/2 {
			return append([]byte("h"), fill(i, 1)[1:]...)
		}
		return fill(i, 1)
	}
	if err := s.Delete(ctx, cellsOf(k)); err != nil {
		t.Fatal(err)
	}
	for round := range 4 {
		other := keys(fmt.Sprint("other", round, "-"), n)
		c := cellsOf(other)
		for i := range c {
			c[i].Body = bytes.Repeat([]byte{0xee}, 1000)
		}
		if err := s.Write(ctx, c); err != nil {
			t.Fatal(err)
		}
		st := stage(t, s, keys(fmt.Sprint("staged", round, "-"), n), slices.Repeat([]int{1000}, n), 0xdd)
		if round%2 == 0 {
			s.Unstage(st)
		} else if err := s.Write(ctx, st); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, c); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range held {
		if !c.Found || !bytes.Equal(c.Value, want(i)) {
			t.Fatalf("held value %d changed after its memory was reused", i)
		}
	}
}

func TestOpenScheme(t *testing.T) {
	ctx := context.Background()
	e1, err := backends.Open(ctx, "memory://")
	if err != nil {
		t.Fatalf("Open(memory://): %v", err)
	}
	e2, err := backends.Open(ctx, "memory://")
	if err != nil {
		t.Fatal(err)
	}
	if e1.Data == nil || e1.Meta == nil || !e1.Local {
		t.Fatalf("Open(memory://) = %+v, want data, metadata and Local", e1)
	}
	if err := e1.Data.Write(ctx, []backends.Cell{{Key: "k", Body: []byte{1}}}); err != nil {
		t.Fatal(err)
	}
	got := []backends.ReadCell{{Key: "k"}}
	if err := e2.Data.Read(ctx, got); err != nil || got[0].Found {
		t.Errorf("a second Open sees the first one's data: %+v, %v", got[0], err)
	}
	if _, ok := e1.Data.(backends.Stager); !ok {
		t.Error("memory data store is not a Stager")
	}
	if _, err := backends.Open(ctx, "memory://host/path"); !errors.Is(err, backends.ErrInvalid) {
		t.Errorf("Open(memory://host/path): %v, want ErrInvalid", err)
	}
}

// The batch the store is measured by: a GRPO step of 512 samples of 512
// int64 tokens, each cell a 64-byte codec head and its row, against copy()
// of the same bytes into preallocated memory (bench's copy() limit).
const (
	benchCells = 512
	benchHead  = 64
	benchBody  = 512 * 8
)

func benchCellsOf() []backends.Cell {
	head := make([]byte, benchHead)
	body := make([]byte, benchCells*benchBody)
	cells := cellsOf(keys("0@responses#", benchCells))
	for i := range cells {
		cells[i].Head, cells[i].Body = head, body[i*benchBody:(i+1)*benchBody]
	}
	return cells
}

func BenchmarkWrite(b *testing.B) {
	cells := benchCellsOf()
	b.Run("memory", func(b *testing.B) {
		s := memory.New()
		b.SetBytes(benchCells * (benchHead + benchBody))
		b.ReportAllocs()
		for b.Loop() {
			if err := s.Write(b.Context(), cells); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("copy", func(b *testing.B) {
		b.SetBytes(benchCells * (benchHead + benchBody))
		b.ReportAllocs()
		dst := make([]byte, benchCells*(benchHead+benchBody)) // faulted in once, as bench's copy() limit
		for b.Loop() {
			for i, c := range cells {
				v := dst[i*(benchHead+benchBody):]
				copy(v[copy(v, c.Head):], c.Body)
			}
		}
	})
}

// BenchmarkWriteFresh is copy() of the batch into fresh memory, arenas
// of the size Write takes: the bound of a store that must keep the bytes
// and never reuses memory a reader may hold.
func BenchmarkWriteFresh(b *testing.B) {
	cells := benchCellsOf()
	b.SetBytes(benchCells * (benchHead + benchBody))
	b.ReportAllocs()
	var keep [][]byte
	for b.Loop() {
		keep = keep[:0]
		var dst []byte
		for _, c := range cells {
			if len(dst) < len(c.Head)+len(c.Body) {
				dst = uninit.Bytes(1 << 20)
				keep = append(keep, dst)
			}
			copy(dst[copy(dst, c.Head):], c.Body)
			dst = dst[(len(c.Head)+len(c.Body)+15)&^15:]
		}
	}
}

func BenchmarkRead(b *testing.B) {
	cells := benchCellsOf()
	s := memory.New()
	if err := s.Write(b.Context(), cells); err != nil {
		b.Fatal(err)
	}
	head := make([]byte, benchCells*benchHead)
	body := make([]byte, benchCells*benchBody)
	rc := make([]backends.ReadCell, benchCells)
	b.Run("memory", func(b *testing.B) {
		b.SetBytes(benchCells * (benchHead + benchBody))
		b.ReportAllocs()
		for b.Loop() {
			for i := range rc {
				rc[i] = backends.ReadCell{Key: cells[i].Key, Head: head[i*benchHead : (i+1)*benchHead], Body: body[i*benchBody : (i+1)*benchBody]}
			}
			if err := s.Read(b.Context(), rc); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("copy", func(b *testing.B) {
		src := make([]byte, benchCells*(benchHead+benchBody))
		b.SetBytes(benchCells * (benchHead + benchBody))
		b.ReportAllocs()
		for b.Loop() {
			for i := range benchCells {
				v := src[i*(benchHead+benchBody):]
				copy(body[i*benchBody:(i+1)*benchBody], v[copy(head[i*benchHead:(i+1)*benchHead], v):])
			}
		}
	})
}
