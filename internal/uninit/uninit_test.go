package uninit

import (
	"runtime"
	"testing"
	"unsafe"
)

func TestBytesLengthCapacityAndAlignment(t *testing.T) {
	for _, n := range []int{0, 1, 100, MinSize - 1, MinSize, MinSize + 1, 1 << 20, 3<<20 + 5} {
		b := Bytes(n)
		if len(b) != n || cap(b) != n {
			t.Fatalf("Bytes(%d): len %d cap %d", n, len(b), cap(b))
		}
		if n >= MinSize && uintptr(unsafe.Pointer(&b[0]))%64 != 0 {
			t.Fatalf("Bytes(%d) starts at %p: not 64-byte aligned", n, &b[0])
		}
	}
}

func TestSmallBytesAreZeroed(t *testing.T) {
	for range 100 {
		garbage := make([]byte, MinSize-1)
		for i := range garbage {
			garbage[i] = 0xAB
		}
		runtime.KeepAlive(garbage)
	}
	runtime.GC()
	b := Bytes(MinSize - 1)
	for i, v := range b {
		if v != 0 {
			t.Fatalf("byte %d of a small Bytes is %#x, want 0", i, v)
		}
	}
}

// The slice must keep its allocation alive and be its own: bytes written
// survive collections and allocations that would reuse freed memory, and
// appending to it never writes into memory of another slice.
func TestBytesSurviveGCAndAreDistinct(t *testing.T) {
	const n = 1 << 20
	bufs := make([][]byte, 8)
	for i := range bufs {
		bufs[i] = Bytes(n)
		for j := range bufs[i] {
			bufs[i][j] = byte(i*7 + j)
		}
	}
	for range 3 {
		runtime.GC()
		for range 16 {
			churn := Bytes(n)
			for j := range churn {
				churn[j] = 0xFF
			}
		}
	}
	for i, b := range bufs {
		for j, v := range b {
			if v != byte(i*7+j) {
				t.Fatalf("buffer %d byte %d = %#x after GC, want %#x", i, j, v, byte(i*7+j))
			}
		}
	}
	grown := append(bufs[0], 1)
	if &grown[0] == &bufs[0][0] {
		t.Fatal("append to a full Bytes slice wrote in place")
	}
}

func BenchmarkAlloc64MiB(b *testing.B) {
	const n = 64 << 20
	b.Run("make", func(b *testing.B) {
		b.SetBytes(n)
		for b.Loop() {
			buf := make([]byte, n)
			buf[n-1] = 1
		}
	})
	b.Run("uninit", func(b *testing.B) {
		b.SetBytes(n)
		for b.Loop() {
			buf := Bytes(n)
			buf[n-1] = 1
		}
	})
}
