package tq

import (
	"unsafe"

	"github.com/tqgo/tqgo/backends"
)

// keyArena builds the storage keys of one call in a single allocation: a
// batch has thousands of cells, and two allocations per key were most of a
// put's allocations. The strings alias the arena, which is never written
// again once a key is cut from it.
type keyArena struct {
	buf  []byte
	ends []int
}

func newKeyArena(n, fieldLen int) *keyArena {
	return &keyArena{buf: make([]byte, 0, n*(12+fieldLen)), ends: make([]int, 0, n)}
}

func (a *keyArena) add(index uint64, field string, gen uint64) {
	a.buf = backends.AppendStorageKey(a.buf, index, field, gen)
	a.ends = append(a.ends, len(a.buf))
}

// keys cuts the strings. The arena must not be appended to afterwards.
func (a *keyArena) keys() []string {
	out := make([]string, len(a.ends))
	if len(a.buf) == 0 {
		return out
	}
	base := unsafe.SliceData(a.buf)
	start := 0
	for i, end := range a.ends {
		out[i] = unsafe.String((*byte)(unsafe.Add(unsafe.Pointer(base), start)), end-start)
		start = end
	}
	return out
}
