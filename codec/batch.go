package codec

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/ants/v2"
)

// Allocator returns one destination buffer per size, each at least that
// long. It is how a zero-copy backend hands out its own memory, so packing
// writes straight into the store. The codec writes exactly sizes[i] bytes at
// the start of buffer i.
type Allocator func(sizes []int) ([][]byte, error)

// HeapAllocator allocates ordinary Go buffers.
func HeapAllocator(sizes []int) ([][]byte, error) {
	total := 0
	for _, s := range sizes {
		total += s
	}
	// One backing array: a batch of small objects costs one allocation.
	backing := make([]byte, total)
	out := make([][]byte, len(sizes))
	off := 0
	for i, s := range sizes {
		out[i] = backing[off : off+s : off+s]
		off += s
	}
	return out, nil
}

// Stats counts what a Packer did, so tests and operators can see which path
// objects took without timing anything.
type Stats struct {
	Batches       uint64 // BatchEncodeInto calls that packed
	SerialObjects uint64 // objects packed on the calling goroutine
	PooledObjects uint64 // objects whose tensor bytes went through the pool
	PoolRuns      uint64 // batches that woke the pool
	PoolTasks     uint64 // tasks submitted to the pool
}

// Packer packs batches of values, size-aware: see Options. It is safe for
// concurrent use. Its pool is created on first need and released by Close.
type Packer struct {
	opts     Options
	encoders sync.Pool // *encoder scratch, reused across batches

	// mu guards closed. Batches hold it shared while they run; Close takes it
	// exclusively, so Close waits for batches in flight.
	mu     sync.RWMutex
	closed bool
	// poolInit serialises the lazy creation of poolPtr among batches.
	poolInit sync.Mutex
	poolPtr  atomic.Pointer[ants.Pool]

	batches, serial, pooled, poolRuns, poolTasks atomic.Uint64
}

// NewPacker returns a Packer with opts (zero fields take their defaults).
func NewPacker(opts Options) *Packer {
	return &Packer{opts: opts.withDefaults()}
}

// Options returns the options in effect, defaults filled in.
func (p *Packer) Options() Options { return p.opts }

// Stats returns the counters so far.
func (p *Packer) Stats() Stats {
	return Stats{
		Batches:       p.batches.Load(),
		SerialObjects: p.serial.Load(),
		PooledObjects: p.pooled.Load(),
		PoolRuns:      p.poolRuns.Load(),
		PoolTasks:     p.poolTasks.Load(),
	}
}

// Close releases the pool and waits for its goroutines to exit. Later calls
// to BatchEncodeInto return ErrClosed. Close is idempotent.
func (p *Packer) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	if pool := p.poolPtr.Swap(nil); pool != nil {
		if err := pool.ReleaseTimeout(10 * time.Second); err != nil {
			return fmt.Errorf("codec: releasing pool: %w", err)
		}
	}
	return nil
}

// BatchEncodeInto packs values into buffers from alloc and returns them, each
// cut to its packed size. Every value is validated and sized before alloc is
// called, so a bad value costs no allocation; the error names the object
// (*ObjectError). alloc returning an error, too few buffers or a buffer
// shorter than its size gives ErrAlloc.
func (p *Packer) BatchEncodeInto(values []any, alloc Allocator) ([][]byte, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return nil, ErrClosed
	}
	e, _ := p.encoders.Get().(*encoder)
	if e == nil {
		e = new(encoder)
	}
	defer p.putEncoder(e)

	layouts := make([]layout, len(values))
	sizes := make([]int, len(values))
	largeBytes := 0
	for i, v := range values {
		l, err := e.add(v)
		if err != nil {
			return nil, &ObjectError{Index: i, Err: err}
		}
		layouts[i], sizes[i] = l, l.size
		if l.size >= p.opts.PackThreshold {
			largeBytes += l.size
		}
	}
	bufs, err := alloc(sizes)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrAlloc, err)
	}
	if len(bufs) != len(sizes) {
		return nil, fmt.Errorf("%w: asked for %d buffers, got %d", ErrAlloc, len(sizes), len(bufs))
	}
	for i, b := range bufs {
		if len(b) < sizes[i] {
			return nil, &ObjectError{Index: i, Err: fmt.Errorf("%w: buffer of %d bytes for a %d-byte object", ErrAlloc, len(b), sizes[i])}
		}
		bufs[i] = b[:sizes[i]]
	}

	workers := p.opts.workers()
	usePool := workers > 1 && largeBytes >= p.opts.PoolMinBatchBytes
	var jobs []copyJob
	var nSerial, nPooled uint64
	for i, l := range layouts {
		dst := bufs[i]
		ts := e.tensors[l.firstT : l.firstT+l.numT]
		packTable(dst, l, ts)
		if usePool && l.size >= p.opts.PackThreshold {
			nPooled++
			tensorOffsets(l, ts, func(t Tensor, off int) {
				jobs = append(jobs, copyJob{dst: dst[off : off+len(t.Data)], src: t.Data})
			})
			continue
		}
		nSerial++
		tensorOffsets(l, ts, func(t Tensor, off int) { copy(dst[off:], t.Data) })
	}
	p.batches.Add(1)
	p.serial.Add(nSerial)
	p.pooled.Add(nPooled)
	if len(jobs) > 0 {
		p.runParallel(jobs, workers)
	}
	return bufs, nil
}

func (p *Packer) putEncoder(e *encoder) {
	if cap(e.arena) > 4<<20 { // do not pin one huge batch's scratch forever
		return
	}
	e.arena = e.arena[:0]
	clear(e.tensors) // drop references to the caller's data
	e.tensors = e.tensors[:0]
	p.encoders.Put(e)
}

// copyJob is one memory copy of the parallel phase.
type copyJob struct{ dst, src []byte }

// minShareBytes keeps shares large enough that a task's fixed cost (about
// 0.5 µs) stays negligible against its copy.
const minShareBytes = 64 << 10

// runParallel splits jobs into byte-balanced shares, cutting large copies
// into pieces, runs one share on the calling goroutine and the rest on the
// pool, and returns when all are done.
func (p *Packer) runParallel(jobs []copyJob, workers int) {
	total := 0
	for _, j := range jobs {
		total += len(j.src)
	}
	per := max((total+workers-1)/workers, minShareBytes)
	shares := make([][]copyJob, 0, workers)
	var cur []copyJob
	room := per
	for _, j := range jobs {
		for len(j.src) > 0 {
			n := min(len(j.src), room)
			cur = append(cur, copyJob{dst: j.dst[:n], src: j.src[:n]})
			j.dst, j.src = j.dst[n:], j.src[n:]
			if room -= n; room == 0 {
				shares = append(shares, cur)
				cur, room = nil, per
			}
		}
	}
	if len(cur) > 0 {
		shares = append(shares, cur)
	}
	pool := p.poolLocked()
	var wg sync.WaitGroup
	if pool != nil && len(shares) > 1 {
		p.poolRuns.Add(1)
		for _, s := range shares[1:] {
			wg.Add(1)
			if err := pool.Submit(func() { defer wg.Done(); runCopies(s) }); err != nil {
				runCopies(s) // a pool that refuses work must not lose it
				wg.Done()
				continue
			}
			p.poolTasks.Add(1)
		}
		shares = shares[:1]
	}
	for _, s := range shares {
		runCopies(s)
	}
	wg.Wait()
}

func runCopies(jobs []copyJob) {
	for _, j := range jobs {
		copy(j.dst, j.src)
	}
}

// poolLocked returns the pool, creating it on first use. The caller holds
// p.mu shared, so Close cannot run meanwhile.
func (p *Packer) poolLocked() *ants.Pool {
	if pool := p.poolPtr.Load(); pool != nil {
		return pool
	}
	p.poolInit.Lock()
	defer p.poolInit.Unlock()
	if pool := p.poolPtr.Load(); pool != nil {
		return pool
	}
	pool, err := ants.NewPool(p.opts.workers())
	if err != nil {
		return nil // packing falls back to the calling goroutine
	}
	p.poolPtr.Store(pool)
	return pool
}

// BatchEncodeInto packs values with a Packer made for this one call and
// closed after it. Reuse a Packer to keep its pool warm across batches.
func BatchEncodeInto(values []any, alloc Allocator, opts Options) ([][]byte, error) {
	p := NewPacker(opts)
	defer p.Close()
	return p.BatchEncodeInto(values, alloc)
}

// BatchDecodeFrom decodes every buffer without copying: tensor bytes and
// []byte values alias the buffers. The error names the failing object.
func BatchDecodeFrom(bufs [][]byte) ([]any, error) {
	var d decoder
	out := make([]any, len(bufs))
	for i, b := range bufs {
		v, err := d.decode(b)
		if err != nil {
			return nil, &ObjectError{Index: i, Err: err}
		}
		out[i] = v
	}
	return out, nil
}
