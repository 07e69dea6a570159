package codec

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/ants/v2"

	"github.com/tqgo/tqgo/internal/uninit"
)

// Allocator returns one destination buffer per size, each at least that
// long. It is how a zero-copy backend hands out its own memory, so packing
// writes straight into the store. The codec writes exactly sizes[i] bytes at
// the start of buffer i. sizes is the packer's scratch: it is valid only
// during the call, so an allocator that needs the sizes later must copy them
// (or use the lengths of the returned buffers, which are cut to the sizes).
type Allocator func(sizes []int) ([][]byte, error)

// HeapAllocator allocates ordinary Go buffers of unspecified contents
// (large ones are not zeroed): the packer writes every byte, and a direct
// caller must too.
func HeapAllocator(sizes []int) ([][]byte, error) {
	total := 0
	for _, s := range sizes {
		total += align(s)
	}
	// One backing array: a batch of small objects costs one allocation.
	// Each buffer starts aligned like the tensor payloads in it, so a
	// decoded tensor's View is zero-copy.
	backing := uninit.Bytes(total) // the packer writes every byte of each buffer
	out := make([][]byte, len(sizes))
	off := 0
	for i, s := range sizes {
		out[i] = backing[off : off+s : off+s]
		off += align(s)
	}
	return out, nil
}

// Stats counts what a Packer did, so tests and operators can see which path
// objects took without timing anything.
type Stats struct {
	Batches       uint64 // BatchEncodeInto calls that packed
	SerialObjects uint64 // objects packed on the calling goroutine alone
	PooledObjects uint64 // objects whose tensor copies were shared with the pool
	PoolRuns      uint64 // batches that woke the pool
	PoolTasks     uint64 // tasks submitted to the pool (at most workers-1 a run)
}

// Packer packs batches of values, size-aware: see Options. It is safe for
// concurrent use. Its pool is created on first need and released by Close.
type Packer struct {
	opts Options

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
// shorter than its size gives ErrAlloc. It is Plan, alloc, Encode.
func (p *Packer) BatchEncodeInto(values []any, alloc Allocator) ([][]byte, error) {
	enc, err := p.Plan(values)
	if err != nil {
		return nil, err
	}
	defer enc.Release()
	bufs, err := alloc(enc.Sizes())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrAlloc, err)
	}
	if err := enc.Encode(bufs); err != nil {
		return nil, err
	}
	return bufs, nil
}

// Encoding is a batch of values validated and sized by Plan, to be packed
// into buffers by Encode: the two phases of an encode, so that a caller
// can do what it must between them (reserve storage keys, ask an engine
// for memory) with no callback from inside the codec. It holds the values
// (do not change them before Encode) and the Packer's shared lock (Close
// waits for it) until Release. Not safe for concurrent use.
type Encoding struct {
	p          *Packer
	e          *encoder
	largeBytes int
}

// Plan validates and sizes values. The error names the failing object
// (*ObjectError), or is ErrClosed after Close.
func (p *Packer) Plan(values []any) (*Encoding, error) {
	p.mu.RLock()
	if p.closed {
		p.mu.RUnlock()
		return nil, ErrClosed
	}
	e := getEncoder()
	threshold := p.opts.PackThreshold
	e.layouts = slices.Grow(e.layouts[:0], len(values))[:len(values)]
	e.sizes = slices.Grow(e.sizes[:0], len(values))[:len(values)]
	largeBytes := 0
	for i, v := range values {
		l := &e.layouts[i]
		if err := e.add(v, l); err != nil {
			putEncoder(e)
			p.mu.RUnlock()
			return nil, &ObjectError{Index: i, Err: err}
		}
		e.sizes[i] = l.size
		if l.size >= threshold {
			largeBytes += l.size
		}
	}
	return &Encoding{p: p, e: e, largeBytes: largeBytes}, nil
}

// Sizes returns each value's packed size, valid until Release.
func (enc *Encoding) Sizes() []int { return enc.e.sizes }

// Encode packs value i into bufs[i] and cuts bufs[i] to its size. Fewer
// buffers than values, or a buffer shorter than its size, gives ErrAlloc
// and writes nothing. Call it at most once.
func (enc *Encoding) Encode(bufs [][]byte) error {
	p, e := enc.p, enc.e
	if len(bufs) != len(e.layouts) {
		return fmt.Errorf("%w: asked for %d buffers, got %d", ErrAlloc, len(e.layouts), len(bufs))
	}
	for i, b := range bufs {
		if size := e.layouts[i].size; len(b) < size {
			return &ObjectError{Index: i, Err: fmt.Errorf("%w: buffer of %d bytes for a %d-byte object", ErrAlloc, len(b), size)}
		}
	}
	threshold := p.opts.PackThreshold
	workers := p.opts.workers()
	usePool := workers > 1 && enc.largeBytes >= p.opts.PoolMinBatchBytes
	e.jobs = e.jobs[:0]
	var nSerial, nPooled uint64
	for i := range e.layouts {
		l := &e.layouts[i]
		bufs[i] = bufs[i][:l.size]
		if usePool && l.size >= threshold {
			nPooled++
			e.pack(bufs[i], l, &e.jobs)
			continue
		}
		nSerial++
		e.pack(bufs[i], l, nil)
	}
	if len(e.jobs) > 0 && !p.runParallel(e, workers) {
		nSerial, nPooled = nSerial+nPooled, 0 // the pool was not woken after all
	}
	p.batches.Add(1)
	p.serial.Add(nSerial)
	p.pooled.Add(nPooled)
	return nil
}

// Release drops the encoding's references to the values and its shared
// lock on the Packer. It is idempotent.
func (enc *Encoding) Release() {
	if enc.e == nil {
		return
	}
	putEncoder(enc.e)
	enc.e = nil
	enc.p.mu.RUnlock()
}

// Chunk sizes of the parallel copy. A chunk is the unit a goroutine claims:
// large enough that claiming it (one atomic add) is noise against copying
// it, small enough that the last chunk, which the batch waits for, is short
// (256 KiB copy in about 15 µs here).
const (
	minChunkBytes = 64 << 10
	maxChunkBytes = 256 << 10
)

// parallelCopy is one batch's parallel phase: chunks that the calling
// goroutine and the pool's goroutines claim in turn until none is left.
// Nobody waits for a goroutine to start: if the pool is slow to wake (a
// parked goroutine can take milliseconds to get a core), the caller copies
// every chunk itself and the latecomer finds nothing to do, so the pool
// path costs at most a few microseconds more than the serial one.
type parallelCopy struct {
	chunks   []copyJob
	next     atomic.Int64  // index of the next unclaimed chunk
	done     atomic.Int64  // chunks copied
	finished chan struct{} // closed when the last chunk is copied
}

// work claims and copies chunks until none is left. A goroutine arriving
// after the last claim returns without touching chunks, so the batch may
// already have returned and recycled them.
func (pc *parallelCopy) work() {
	n := int64(len(pc.chunks))
	for {
		i := pc.next.Add(1) - 1
		if i >= n {
			return
		}
		copy(pc.chunks[i].dst, pc.chunks[i].src)
		if pc.done.Add(1) == n {
			close(pc.finished)
		}
	}
}

// runParallel copies e.jobs with the calling goroutine and up to workers-1
// pool goroutines, cutting them into chunks, and returns when every byte is
// copied. It reports whether it woke the pool (a pool that refused every
// share, its workers busy with other batches, was not woken).
func (p *Packer) runParallel(e *encoder, workers int) bool {
	total := 0
	for _, j := range e.jobs {
		total += len(j.src)
	}
	chunk := min(max(total/(16*workers), minChunkBytes), maxChunkBytes)
	if total <= chunk {
		runCopies(e.jobs) // one chunk: nothing to share
		return false
	}
	pool := p.poolLocked()
	if pool == nil {
		runCopies(e.jobs)
		return false
	}
	chunks := e.pieces[:0]
	for _, j := range e.jobs {
		for len(j.src) > 0 {
			n := min(len(j.src), chunk)
			chunks = append(chunks, copyJob{dst: j.dst[:n], src: j.src[:n]})
			j.dst, j.src = j.dst[n:], j.src[n:]
		}
	}
	e.pieces = chunks
	pc := &parallelCopy{chunks: chunks, finished: make(chan struct{})}

	submitted := 0
	for range min(workers-1, len(chunks)-1) {
		if err := pool.Submit(pc.work); err != nil {
			break // a pool that refuses work leaves it to the caller
		}
		submitted++
	}
	pc.work()
	<-pc.finished
	if submitted == 0 {
		return false
	}
	p.poolRuns.Add(1)
	p.poolTasks.Add(uint64(submitted))
	return true
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
	// Nonblocking: when concurrent batches keep every worker busy, a share
	// is packed on its caller rather than queued behind another batch.
	pool, err := ants.NewPool(p.opts.workers(), ants.WithNonblocking(true))
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
	d := decoder{slabSize: 1024}
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

// BatchDecodeTensors decodes bufs that each hold one bare tensor (what
// packing a Tensor writes) to what BatchDecodeFrom would give, without
// boxing every tensor in an interface: a column of tensors costs a few
// allocations, not one per row. It returns nil, false if bufs is empty or a
// buffer holds anything else or does not read cleanly; BatchDecodeFrom then
// gives its value or its error.
func BatchDecodeTensors(bufs [][]byte) ([]Tensor, bool) {
	if len(bufs) == 0 {
		return nil, false
	}
	d := decoder{slabSize: 1024}
	out := make([]Tensor, len(bufs))
	for i, b := range bufs {
		var ok bool
		if out[i], ok = d.singleTensor(b); !ok {
			return nil, false
		}
	}
	return out, true
}

// BatchDecodeStack is Stack of what BatchDecodeTensors gives, for bufs
// that each hold one bare tensor, all of one dtype and shape; it copies the
// tensors' bytes into the stacked tensor without decoding each into a
// Tensor first. It returns false if bufs is empty or BatchDecodeTensors
// would, or if the tensors differ in dtype or shape.
func BatchDecodeStack(bufs [][]byte) (Tensor, bool) { return BatchDecodeStackInto(bufs, nil) }

// BatchDecodeStackInto is BatchDecodeStack writing the stacked bytes into
// dst when it holds enough of them and is aligned for the dtype (the
// result's Data is then dst's first bytes), and into fresh memory
// otherwise. Reusing one buffer across reads spares the page faults of
// fresh memory, which for large columns cost more than the copy. dst must
// not overlap bufs. When it returns false, dst is unchanged.
func BatchDecodeStackInto(bufs [][]byte, dst []byte) (Tensor, bool) {
	if len(bufs) == 0 {
		return Tensor{}, false
	}
	var d decoder
	dt, first, ok := d.readSingle(bufs[0])
	if !ok {
		return Tensor{}, false
	}
	shape := append([]int64{int64(len(bufs))}, d.dims...)
	if _, err := NumElements(shape); err != nil {
		return Tensor{}, false // rows of no bytes, too many of them
	}
	rb := len(first)
	for _, b := range bufs[1:] {
		t, data, ok := d.readSingle(b)
		if !ok || t != dt || len(data) != rb || !slices.Equal(d.dims, shape[1:]) {
			return Tensor{}, false
		}
	}
	var out []byte
	if need := rb * len(bufs); need > 0 && len(dst) >= need && AlignedFor(dst, dt.ItemSize()) {
		out = dst[:need:need]
	} else {
		out = uninit.Bytes(need) // every byte is copied over below
	}
	for i, b := range bufs {
		data, _ := payload(b, 1, tensorTableEnd) // read above
		copy(out[i*rb:], data)
	}
	return Tensor{DType: dt, Shape: shape, Data: out}, true
}
