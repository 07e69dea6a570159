package file

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/tqgo/tqgo/internal/uninit"
)

// Frames of recycleMin bytes or more (a put's cells, a checkpoint's
// chunks) lie in allocations the engine reuses: a frame's memory goes to
// a free list once nothing refers to it, and a later frame of about its
// size is built in it. Memory the process touched before costs a quarter
// of fresh memory to fill (6 MiB: 0.45 ms against 2-25 ms on the 2-core
// VM, where fresh pages fault in slowly), and Go does not zero it again.
// The free list holds at most maxFree bytes.
const (
	recycleMin = 64 << 10
	maxFree    = 64 << 20
	// smallValue is the length under which Read copies a value of a
	// recycled frame out for its caller; a longer one is handed out as it
	// lies, and its frame is never recycled.
	smallValue = 64 << 10
)

// frameBuf is the allocation of a frame of recycleMin bytes or more.
// refs counts what may still read it: the op that wrote it until the
// writer is done with it, each cell of the state whose key and value lie
// in it, and each read or checkpoint copying out of it. At zero it goes
// to the free list, unless pinned: a value of it was handed out to a
// reader as it lies, for as long as the reader keeps it.
type frameBuf struct {
	buf    []byte
	refs   atomic.Int32
	pinned atomic.Bool
}

// framePool is an engine's free list of frame allocations.
type framePool struct {
	mu    sync.Mutex
	bufs  []*frameBuf // oldest first
	bytes int
}

// get returns an allocation of at least n bytes, at most an eighth more,
// of unspecified contents, holding one reference.
func (p *framePool) get(n int) *frameBuf {
	p.mu.Lock()
	for i := len(p.bufs) - 1; i >= 0; i-- { // the newest, warmest, first
		f := p.bufs[i]
		if c := len(f.buf); c >= n && c-c/8 <= n {
			p.bufs = slices.Delete(p.bufs, i, i+1)
			p.bytes -= c
			p.mu.Unlock()
			f.refs.Store(1)
			return f
		}
	}
	p.mu.Unlock()
	f := &frameBuf{buf: uninit.Bytes(n)}
	f.refs.Store(1)
	return f
}

// release drops a reference to f (nil: a frame not recycled), putting it
// on the free list when it was the last, evicting the oldest beyond
// maxFree.
func (p *framePool) release(f *frameBuf) {
	if f == nil || f.refs.Add(-1) != 0 || f.pinned.Load() || len(f.buf) > maxFree {
		return
	}
	p.mu.Lock()
	for p.bytes+len(f.buf) > maxFree {
		p.bytes -= len(p.bufs[0].buf)
		p.bufs[0] = nil
		p.bufs = p.bufs[1:]
	}
	p.bufs = append(p.bufs, f)
	p.bytes += len(f.buf)
	p.mu.Unlock()
}

// builder starts a frame of kind whose body is size bytes, in a recycled
// allocation if it is large enough to be worth one.
func (p *framePool) builder(kind byte, size int) builder {
	n := frameHeader + 1 + size + stampSize
	if n < recycleMin {
		return newBuilder(kind, size)
	}
	f := p.get(n)
	b := startBuilder(f.buf[:frameHeader:n], kind, size)
	b.fb = f
	return b
}
