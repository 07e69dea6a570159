package memory_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/memory"
)

func keys(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

func allocate(t *testing.T, s *memory.Store, keys []string, sizes []int, fill byte) backends.Staged {
	t.Helper()
	st, err := s.Allocate(t.Context(), keys, sizes)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range st.Buffers() {
		for i := range b {
			b[i] = fill
		}
	}
	return st
}

// TestStagedBuffersShareNoMemory writes every byte each buffer's capacity
// allows and checks that no other buffer, of the same batch or of another
// one, nor an already published value, changed. Small buffers of a batch
// share one allocation, so their capacity must end where they do.
func TestStagedBuffersShareNoMemory(t *testing.T) {
	ctx := t.Context()
	s := memory.New()
	sizes := []int{0, 1, 7, 100, 4095, 4096, 10000, 3}
	pub := allocate(t, s, keys("pub", len(sizes)), sizes, 0x11)
	if err := pub.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	a := allocate(t, s, keys("a", len(sizes)), sizes, 0xaa)
	b := allocate(t, s, keys("b", len(sizes)), sizes, 0xbb)
	for i, buf := range a.Buffers() {
		if cap(buf) != len(buf) {
			t.Errorf("buffer %d: cap %d, len %d: writing up to cap would reach another buffer", i, cap(buf), len(buf))
		}
	}
	for _, buf := range b.Buffers() {
		full := buf[:cap(buf)]
		for i := range full {
			full[i] = 0xff
		}
	}
	for i, buf := range a.Buffers() {
		if !bytes.Equal(buf, bytes.Repeat([]byte{0xaa}, sizes[i])) {
			t.Errorf("buffer %d of batch a changed by writes to batch b", i)
		}
	}
	got, err := s.Get(ctx, keys("pub", len(sizes)))
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range got {
		if !bytes.Equal(v, bytes.Repeat([]byte{0x11}, sizes[i])) {
			t.Errorf("published value %d changed by writes to later batches", i)
		}
	}
	// Within a batch: writing one buffer leaves its neighbours alone.
	bufs := a.Buffers()
	bufs[2][len(bufs[2])-1] = 0
	if bufs[3][0] != 0xaa || bufs[1][0] != 0xaa {
		t.Error("writing the last byte of a buffer changed a neighbour")
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
	k := keys("k", 3)
	if err := s.Put(ctx, k, [][]byte{{1}, {}, {3}}); err != nil {
		t.Fatal(err)
	}
	want("after Put of 3 keys", 3)
	if err := s.Put(ctx, k[:2], [][]byte{{9}, {9}}); err != nil {
		t.Fatal(err)
	}
	want("after overwriting 2", 3)
	if err := s.Delete(ctx, []string{k[0], "missing"}); err != nil {
		t.Fatal(err)
	}
	want("after Delete of 1 and a missing key", 2)
	st, err := s.Allocate(ctx, keys("s", 4), []int{1, 2, 3, 5000})
	if err != nil {
		t.Fatal(err)
	}
	want("with 4 buffers staged", 2)
	if err := st.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	want("after Publish of 4", 6)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	want("after Close", 0)
}

// TestGetResultStable checks what Store's doc promises: a Put replaces the
// slice, so a value a reader holds never changes under it.
func TestGetResultStable(t *testing.T) {
	ctx := t.Context()
	s := memory.New()
	k := []string{"k"}
	if err := s.Put(ctx, k, [][]byte{[]byte("first")}); err != nil {
		t.Fatal(err)
	}
	held, err := s.Get(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.Allocate(ctx, k, []int{5})
	if err != nil {
		t.Fatal(err)
	}
	copy(st.Buffers()[0], "third")
	if err := s.Put(ctx, k, [][]byte{[]byte("second")}); err != nil {
		t.Fatal(err)
	}
	if err := st.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	if string(held[0]) != "first" {
		t.Errorf("held value changed to %q by later writes", held[0])
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
	if e1.Data == nil || e1.Meta == nil {
		t.Fatalf("Open(memory://) = %+v, want data and metadata", e1)
	}
	if err := e1.Data.Put(ctx, []string{"k"}, [][]byte{{1}}); err != nil {
		t.Fatal(err)
	}
	got, err := e2.Data.Get(ctx, []string{"k"})
	if err != nil || got[0] != nil {
		t.Errorf("a second Open sees the first one's data: %v, %v", got, err)
	}
	if _, ok := e1.Data.(backends.Allocator); !ok {
		t.Error("memory data backend is not an Allocator")
	}
}
