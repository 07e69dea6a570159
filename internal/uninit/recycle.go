package uninit

import (
	"runtime"
	"sync"
	"unsafe"
)

// MaxRecycled bounds the bytes Recycled holds for reuse: buffers found
// unreachable beyond it are left to the garbage collector.
const MaxRecycled = 64 << 20

// recycled are buffers of Recycled that their last user dropped: the
// garbage collector found them unreachable and their finalizer kept them
// here, so that a buffer of the same size is handed out again with its
// pages already in memory.
var recycled struct {
	mu    sync.Mutex
	bufs  [][]byte // full capacity, past the lead
	bytes int
}

// Recycled is Bytes for memory that callers hand on and drop when they
// are done with it (a column a read returns): from MinSize on, it first
// takes a buffer of the same size class that an earlier Recycled handed
// out and the garbage collector has since found unreachable (its finalizer
// keeps it, up to MaxRecycled bytes in all), so that its first writes find
// the pages in memory rather than faulting fresh ones in, each costing
// more than copying into it. The contents are unspecified, as Bytes'. A
// buffer is recycled only once nothing refers to any byte of it: a view
// into it keeps it reachable.
func Recycled(n int) []byte {
	if n < MinSize {
		return make([]byte, n)
	}
	recycled.mu.Lock()
	for i, b := range recycled.bufs {
		if cap(b) >= n && cap(b)-cap(b)/8 <= n { // at most 1/8 wasted
			last := len(recycled.bufs) - 1
			recycled.bufs[i] = recycled.bufs[last]
			recycled.bufs[last] = nil
			recycled.bufs = recycled.bufs[:last]
			recycled.bytes -= cap(b)
			recycled.mu.Unlock()
			track(b)
			return b[:n:n]
		}
	}
	recycled.mu.Unlock()
	b := Bytes(n)
	track(b)
	return b
}

// track sets the finalizer that recycles b's allocation once unreachable.
func track(b []byte) {
	base := (*[len(lead)]byte)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(b)), -len(lead)))
	size := cap(b)
	runtime.SetFinalizer(base, func(p *[len(lead)]byte) {
		recycled.mu.Lock()
		defer recycled.mu.Unlock()
		if recycled.bytes+size > MaxRecycled {
			return // the garbage collector frees it
		}
		recycled.bufs = append(recycled.bufs, unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(p), len(lead))), size))
		recycled.bytes += size
	})
}
