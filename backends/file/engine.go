package file

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tqgo/tqgo/backends"
)

// engine is one opened directory, shared by every Open of it in this
// process (see registry). Its state is in memory (st); every change is a
// frame of the write-ahead log first, applied by the writer goroutine
// once written.
type engine struct {
	dir    string // absolute, symlinks resolved: the registry's key
	opts   Options
	clock  func() time.Time
	unlock func() error // releases the directory's lock
	fs     fileSystem

	frames framePool // the large frames' allocations, reused

	mu    sync.RWMutex // guards st and wakes
	st    *state
	wakes map[string]chan struct{} // closed at the partition's next append

	qmu       sync.Mutex // guards the queue and what enqueue checks
	queue     []*op
	closed    bool
	failed    error // set once a write or fsync failed: every later write fails with it
	lastStamp int64 // the last stamp handed out: stamps never go back
	kick      chan struct{}

	// The writer's own, but seg, which the syncer fsyncs under segMu.
	segMu    sync.Mutex
	seg      fsFile
	segSeq   uint64
	segSize  int64
	segSalt  uint32
	wbuf     []byte
	dirty    atomic.Bool  // written since the last fsync
	written  atomic.Int64 // the segment's bytes written (segSize, for the syncer)
	durable  atomic.Int64 // the segment's bytes known on the disk (fsynced)
	marked   int64        // the most a kindSynced frame of the segment said durable
	walBytes atomic.Int64 // bytes of every segment the newest checkpoint does not replace

	ckptRunning atomic.Bool
	ckptRetry   atomic.Int64 // after a failed checkpoint, walBytes before the next try
	ckptErr     atomic.Pointer[error]
	checkpoints atomic.Int64
	reused      atomic.Int64 // segments started in a recycled file
	truncated   []string     // torn tails cut at open: "path at offset"

	readOnly bool // a view (Options.ReadOnly): no lock, no writer, writes refused
	view     View // what a view read

	stop chan struct{} // closed by close: the syncer and a checkpoint stop
	wg   sync.WaitGroup

	refs int // handles open; guarded by registry.mu
}

// registry holds the engines open in this process by directory: one
// process may open a directory any number of times, and every Open shares
// the one engine (its lock on the directory admits one engine).
var registry = struct {
	mu sync.Mutex
	m  map[string]*engine
}{m: map[string]*engine{}}

// Open opens the engine over dir, creating the directory if missing,
// and recovering its state (the newest checkpoint and the log after it)
// if it holds one. In this process, every Open of one directory shares
// one engine, closed when the last client closes it; another process
// holding the directory makes Open fail with a *LockedError (matching
// ErrLocked) naming it. With o.ReadOnly, Open takes no lock and opens a
// view of the existing directory of its own (see View), whose writes fail
// with ErrReadOnly. Recovery is not cancelled by ctx: Open checks ctx
// once, before it begins.
func Open(ctx context.Context, dir string, o Options) (backends.Engine, error) {
	if err := ctx.Err(); err != nil {
		return backends.Engine{}, err
	}
	if err := o.check(); err != nil {
		return backends.Engine{}, err
	}
	if dir == "" {
		return backends.Engine{}, fmt.Errorf("%w: file: no directory", backends.ErrInvalid)
	}
	if o.ReadOnly {
		e, err := openView(dir, o)
		if err != nil {
			return backends.Engine{}, err
		}
		e.refs = 2
		return backends.Engine{Data: &store{handle: newHandle(e)}, Log: &log{handle: newHandle(e)}, Local: true}, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return backends.Engine{}, fmt.Errorf("file: %w", err)
	}
	abs, err := filepath.Abs(dir)
	if err == nil {
		abs, err = filepath.EvalSymlinks(abs)
	}
	if err != nil {
		return backends.Engine{}, fmt.Errorf("file: %w", err)
	}
	registry.mu.Lock()
	defer registry.mu.Unlock()
	e := registry.m[abs]
	switch {
	case e == nil:
		if e, err = openEngine(abs, o); err != nil {
			return backends.Engine{}, err
		}
		registry.m[abs] = e
	case !e.opts.same(o):
		return backends.Engine{}, fmt.Errorf("%w: file: %s is open in this process with %s, asked with %s", backends.ErrInvalid, abs, e.opts, o)
	}
	e.refs += 2
	return backends.Engine{Data: &store{handle: newHandle(e)}, Log: &log{handle: newHandle(e)}, Local: true}, nil
}

// openEngine locks dir, recovers its state and starts the writer.
func openEngine(dir string, o Options) (*engine, error) {
	unlock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	e := &engine{dir: dir, opts: o.withDefaults(), unlock: unlock, fs: defaultFS, wakes: map[string]chan struct{}{},
		kick: make(chan struct{}, 1), stop: make(chan struct{})}
	e.st = newState(&e.frames)
	e.clock = e.opts.clock
	next, err := e.recoverDir()
	if err == nil {
		_, err = e.newSegment(next)
	}
	if err != nil {
		_ = unlock()
		return nil, fmt.Errorf("file: opening %s: %w", dir, err)
	}
	e.wg.Add(1)
	go e.writer()
	if d := time.Duration(e.opts.Sync); d > 0 {
		e.wg.Add(1)
		go e.syncer(d)
	}
	if err := e.releaseClaims(); err != nil {
		return nil, errors.Join(fmt.Errorf("file: opening %s: %w", dir, err), e.close())
	}
	return e, nil
}

// release drops one handle's reference, closing the engine with the
// last.
func (e *engine) release() error {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if e.refs--; e.refs > 0 {
		return nil
	}
	if e.readOnly {
		return e.closeView()
	}
	delete(registry.m, e.dir)
	return e.close()
}

// close writes what is queued, stops every goroutine, fsyncs the log and
// releases the directory.
func (e *engine) close() error {
	e.qmu.Lock()
	e.closed = true
	e.qmu.Unlock()
	select {
	case e.kick <- struct{}{}:
	default:
	}
	close(e.stop)
	e.wg.Wait()
	e.qmu.Lock()
	failed := e.failed
	e.qmu.Unlock()
	e.segMu.Lock()
	err := e.syncSegment()
	if err == nil && failed == nil {
		// Say so in the log: a record found damaged before here on
		// reopen is damage, not a torn write.
		if err = e.writeMark(); err == nil {
			err = e.seg.Sync()
		}
		if err == nil && e.opts.Sync == SyncNever {
			// The segment's name (under the other policies, made durable
			// as it began).
			err = e.fs.SyncDir(e.dir)
		}
	}
	if cerr := e.seg.Close(); err == nil {
		err = cerr
	}
	e.segMu.Unlock()
	e.mu.Lock()
	for p, ch := range e.wakes {
		close(ch)
		delete(e.wakes, p)
	}
	e.mu.Unlock()
	return errors.Join(err, e.unlock())
}

// wake wakes the readers waiting on partition. e.mu is held.
func (e *engine) wake(partition string) {
	if ch := e.wakes[partition]; ch != nil {
		close(ch)
		delete(e.wakes, partition)
	}
}

// handle is one client's reference to the engine: closing it closes it
// alone.
type handle struct {
	e    *engine
	once sync.Once
	done chan struct{} // closed by Close
	err  error
}

func newHandle(e *engine) handle { return handle{e: e, done: make(chan struct{})} }

func (h *handle) check(ctx context.Context) error {
	select {
	case <-h.done:
		return backends.ErrClosed
	default:
		return ctx.Err()
	}
}

// Close releases the handle; the last closes the engine.
func (h *handle) Close() error {
	h.once.Do(func() {
		close(h.done)
		h.err = h.e.release()
	})
	return h.err
}

// submit queues the frame b holds (its body decoded into o) and waits for
// it to be applied. A context that ends first leaves the outcome
// unknown: the frame is written all the same.
func (h *handle) submit(ctx context.Context, b *builder, o *op) error {
	partial, err := b.seal()
	if err == nil {
		if err = b.decode(o); err != nil {
			err = fmt.Errorf("file: decoding its own record: %w", err) // a bug
		}
	}
	if err == nil {
		o.fb = b.fb // the writer's from now on, released once applied
		err = h.e.enqueue(b, partial, o)
	}
	if err != nil {
		h.e.frames.release(b.fb)
		return err
	}
	select {
	case <-o.done:
		return o.err
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", backends.ErrOutcomeUnknown, ctx.Err())
	}
}
