package uninit

import (
	"runtime"
	"testing"
	"time"
	"unsafe"
)

// collectUntil runs the garbage collector until cond holds (finalizers
// run on a goroutine of their own, after the cycle that found the buffer
// unreachable), or fails t after a while.
func collectUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for range 100 {
		runtime.GC()
		if cond() {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("condition not reached after 100 collections")
}

func held() int {
	recycled.mu.Lock()
	defer recycled.mu.Unlock()
	return recycled.bytes
}

// A buffer dropped is handed out again, once the collector found it
// unreachable; one still referenced is not; a size far off is not.
func TestRecycledReusesDroppedBuffers(t *testing.T) {
	const n = 1 << 20
	kept := Recycled(n)
	kept[0] = 1
	addrKept := uintptr(unsafe.Pointer(&kept[0]))
	dropped := Recycled(n)
	addrDropped := uintptr(unsafe.Pointer(&dropped[0]))
	dropped = nil
	before := held()
	collectUntil(t, func() bool { return held() >= before+n })

	if b := Recycled(n / 2); uintptr(unsafe.Pointer(&b[0])) == addrDropped {
		t.Error("a buffer twice the size asked for was handed out")
	}
	b := Recycled(n)
	if got := uintptr(unsafe.Pointer(&b[0])); got != addrDropped {
		t.Errorf("Recycled(%d) = %#x, want the dropped buffer %#x", n, got, addrDropped)
	}
	if len(b) != n || cap(b) != n {
		t.Errorf("len %d cap %d, want %d", len(b), cap(b), n)
	}
	if uintptr(unsafe.Pointer(&b[0])) == addrKept || kept[0] != 1 {
		t.Error("a buffer still referenced was handed out again")
	}
	runtime.KeepAlive(kept)
}

// The buffers held for reuse never exceed MaxRecycled.
func TestRecycledBound(t *testing.T) {
	const n = 8 << 20
	bufs := make([][]byte, 2*MaxRecycled/n)
	for i := range bufs {
		bufs[i] = Recycled(n)
	}
	bufs = nil
	collectUntil(t, func() bool { return held() >= MaxRecycled-n })
	runtime.GC()
	runtime.GC()
	if h := held(); h > MaxRecycled {
		t.Errorf("%d bytes held, bound %d", h, MaxRecycled)
	}
}
