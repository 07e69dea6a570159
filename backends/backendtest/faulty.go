package backendtest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/tqgo/tqgo/backends"
)

// Op names a backend method that [Faulty] counts, delays and can fail.
type Op int

const (
	OpPut      Op = iota // Backend.Put, TaggedWriter.PutTagged and SplitWriter.PutSplit
	OpGet                // Backend.Get, TaggedReader.GetTagged and SplitReader.GetSplit
	OpDelete             // Backend.Delete and TaggedDeleter.DeleteTagged
	OpAllocate           // Allocator.Allocate
	OpPublish            // Staged.Publish
	OpDiscard            // Staged.Discard
	numOps
)

var opNames = [numOps]string{"Put", "Get", "Delete", "Allocate", "Publish", "Discard"}

func (o Op) String() string {
	if o < 0 || o >= numOps {
		return fmt.Sprintf("Op(%d)", int(o))
	}
	return opNames[o]
}

// Faulty counts the calls a wrapped backend (see [Wrap]) receives and
// injects faults and delays into them, so tests of higher layers can see a
// backend fail without a server. The zero Faulty injects nothing and is
// ready to use.
//
// Counting: every call of an [Op] counts, failed or not, with the number of
// keys it was given (for Publish and Discard, the number of buffers
// staged). Faults are set relative to the calls made so far: n = 1 is the
// next call. A fault replaces the call: the inner backend is not called,
// except for the keys FailPutAfter lets through. When several faults match
// one call, the first one set fires.
//
// Faulty is safe for concurrent use: faults and delays may be set, and
// counters read, while calls are in flight. Under concurrent calls, "the nth
// call" is the nth to start, and a one-shot fault fires on that call only.
type Faulty struct {
	mu  sync.Mutex // guards ops
	ops [numOps]opState
}

type opState struct {
	seq     int   // calls ever made; never reset, faults count from it
	calls   int   // calls since the last ResetCounts
	keys    int   // keys of those calls
	batches []int // key count of each of those calls, in order
	delay   time.Duration
	faults  []fault
}

type fault struct {
	at    int // the seq of the call that fails; 0 for every call
	err   error
	write int // for OpPut: keys written through before failing
}

// FailNth makes the nth call of op from now (1 is the next) fail with an
// error wrapping err, or [ErrInjected] if err is nil, without reaching the
// inner backend. It panics if n < 1.
func (f *Faulty) FailNth(op Op, n int, err error) {
	if n < 1 {
		panic(fmt.Sprintf("backendtest: FailNth(%v, %d): n must be at least 1", op, n))
	}
	f.add(op, n, 0, err)
}

// FailPutAfter makes the nth Put or PutTagged from now (1 is the next)
// write its first keys keys through to the inner backend (all of them if it
// has fewer) and then fail with an error wrapping err, or [ErrInjected] if
// err is nil, as a write that broke off part-way does. It panics if n < 1
// or keys < 0.
func (f *Faulty) FailPutAfter(n, keys int, err error) {
	if n < 1 || keys < 0 {
		panic(fmt.Sprintf("backendtest: FailPutAfter(%d, %d): want n >= 1, keys >= 0", n, keys))
	}
	f.add(OpPut, n, keys, err)
}

// FailAll makes every call of op fail with an error wrapping err, or
// [ErrInjected] if err is nil, until [Faulty.Clear].
func (f *Faulty) FailAll(op Op, err error) {
	f.add(op, 0, 0, err)
}

// add sets a fault on the nth call from now (every call if n is 0).
func (f *Faulty) add(op Op, n, write int, err error) {
	if op < 0 || op >= numOps {
		panic(fmt.Sprintf("backendtest: fault on unknown %v", op))
	}
	if err == nil {
		err = ErrInjected
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s := &f.ops[op]
	at := 0
	if n > 0 {
		at = s.seq + n
	}
	s.faults = append(s.faults, fault{at: at, err: err, write: write})
}

// SetDelay makes every call of op wait d before doing anything (0 turns
// the delay off). A call whose context ends first returns the context's
// error.
func (f *Faulty) SetDelay(op Op, d time.Duration) {
	f.mu.Lock()
	f.ops[op].delay = d
	f.mu.Unlock()
}

// Clear removes every fault and delay not yet fired; counters are kept.
func (f *Faulty) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.ops {
		f.ops[i].faults, f.ops[i].delay = nil, 0
	}
}

// Calls returns the number of calls of op since the last ResetCounts.
func (f *Faulty) Calls(op Op) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ops[op].calls
}

// Keys returns the number of keys the calls of op since the last
// ResetCounts were given, summed.
func (f *Faulty) Keys(op Op) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ops[op].keys
}

// Batches returns the key count of each call of op since the last
// ResetCounts, in the order the calls started: how a caller chunked its
// work.
func (f *Faulty) Batches(op Op) []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.ops[op].batches)
}

// ResetCounts zeroes the counters. Faults set before keep their place: a
// fault on the next call still fires on the next call.
func (f *Faulty) ResetCounts() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.ops {
		s := &f.ops[i]
		s.calls, s.keys, s.batches = 0, 0, nil
	}
}

// begin counts a call of op with n keys, waits out the op's delay, and
// returns the fault that fires on the call, if any. A non-nil error means
// the context ended during the delay.
func (f *Faulty) begin(ctx context.Context, op Op, n int) (*fault, error) {
	f.mu.Lock()
	s := &f.ops[op]
	s.seq++
	s.calls++
	s.keys += n
	s.batches = append(s.batches, n)
	seq, delay := s.seq, s.delay
	var fired *fault
	for i, ft := range s.faults {
		if ft.at == seq || ft.at == 0 {
			fired = &fault{at: seq, err: fmt.Errorf("backendtest: %v call %d: %w", op, seq, ft.err), write: ft.write}
			if ft.at != 0 {
				s.faults = slices.Delete(s.faults, i, i+1)
			}
			break
		}
	}
	f.mu.Unlock()

	if delay > 0 {
		timer := time.NewTimer(delay)
		defer timer.Stop()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-timer.C:
		}
	}
	return fired, nil
}

// Wrap returns inner with every call counted, delayed and failed as f
// says (a nil f is a fresh Faulty nobody configures). The result implements
// exactly the optional interfaces of package backends that inner does
// (Allocator, TaggedWriter, TaggedReader, TaggedDeleter; SplitReader and
// SplitWriter when inner has no tagged interface, as the engines that have
// them do), and the Staged values its Allocate returns are TagReporters
// exactly when inner's are. GetSplit counts and fails as Get, PutSplit as
// Put. One Faulty may wrap several backends; it then counts their calls
// together.
func Wrap(inner backends.Backend, f *Faulty) backends.Backend {
	if f == nil {
		f = new(Faulty)
	}
	c := &core{f: f, inner: inner}
	if b := wrapSplit(c, inner); b != nil {
		return b
	}
	var (
		a allocator
		w taggedWriter
		r taggedReader
		d taggedDeleter
	)
	mask := 0
	if in, ok := inner.(backends.Allocator); ok {
		a, mask = allocator{c, in}, mask|1
	}
	if in, ok := inner.(backends.TaggedWriter); ok {
		w, mask = taggedWriter{c, in}, mask|2
	}
	if in, ok := inner.(backends.TaggedReader); ok {
		r, mask = taggedReader{c, in}, mask|4
	}
	if in, ok := inner.(backends.TaggedDeleter); ok {
		d, mask = taggedDeleter{c, in}, mask|8
	}
	type (
		B = backends.Backend
		A = backends.Allocator
		W = backends.TaggedWriter
		R = backends.TaggedReader
		D = backends.TaggedDeleter
	)
	switch mask {
	case 0:
		return c
	case 1:
		return struct {
			B
			A
		}{c, a}
	case 2:
		return struct {
			B
			W
		}{c, w}
	case 3:
		return struct {
			B
			A
			W
		}{c, a, w}
	case 4:
		return struct {
			B
			R
		}{c, r}
	case 5:
		return struct {
			B
			A
			R
		}{c, a, r}
	case 6:
		return struct {
			B
			W
			R
		}{c, w, r}
	case 7:
		return struct {
			B
			A
			W
			R
		}{c, a, w, r}
	case 8:
		return struct {
			B
			D
		}{c, d}
	case 9:
		return struct {
			B
			A
			D
		}{c, a, d}
	case 10:
		return struct {
			B
			W
			D
		}{c, w, d}
	case 11:
		return struct {
			B
			A
			W
			D
		}{c, a, w, d}
	case 12:
		return struct {
			B
			R
			D
		}{c, r, d}
	case 13:
		return struct {
			B
			A
			R
			D
		}{c, a, r, d}
	case 14:
		return struct {
			B
			W
			R
			D
		}{c, w, r, d}
	default:
		return struct {
			B
			A
			W
			R
			D
		}{c, a, w, r, d}
	}
}

// core wraps the required methods; the types below add one optional
// interface each, and Wrap embeds those the inner backend has.
type core struct {
	f     *Faulty
	inner backends.Backend
}

var (
	_ backends.Backend       = (*core)(nil)
	_ backends.Allocator     = allocator{}
	_ backends.TaggedWriter  = taggedWriter{}
	_ backends.TaggedReader  = taggedReader{}
	_ backends.TaggedDeleter = taggedDeleter{}
	_ backends.Staged        = (*staged)(nil)
	_ backends.TagReporter   = reportingStaged{}
)

func (c *core) Put(ctx context.Context, keys []string, values [][]byte) error {
	ft, err := c.f.begin(ctx, OpPut, len(keys))
	if err != nil {
		return err
	}
	if ft != nil {
		return ft.putThrough(func(n int) error { return c.inner.Put(ctx, keys[:n], values[:n]) }, keys, len(values))
	}
	return c.inner.Put(ctx, keys, values)
}

// putThrough writes the first ft.write keys with put, then returns the
// fault's error. Mismatched lengths write nothing.
func (ft *fault) putThrough(put func(n int) error, keys []string, nvalues int) error {
	if n := min(ft.write, len(keys)); n > 0 {
		if len(keys) != nvalues {
			return fmt.Errorf("%w: %d keys, %d values", backends.ErrInvalid, len(keys), nvalues)
		}
		if err := put(n); err != nil {
			return err
		}
	}
	return ft.err
}

func (c *core) Get(ctx context.Context, keys []string) ([][]byte, error) {
	ft, err := c.f.begin(ctx, OpGet, len(keys))
	if err != nil {
		return nil, err
	}
	if ft != nil {
		return nil, ft.err
	}
	return c.inner.Get(ctx, keys)
}

func (c *core) Delete(ctx context.Context, keys []string) error {
	ft, err := c.f.begin(ctx, OpDelete, len(keys))
	if err != nil {
		return err
	}
	if ft != nil {
		return ft.err
	}
	return c.inner.Delete(ctx, keys)
}

// Close closes the inner backend; it is neither counted nor failed.
func (c *core) Close() error { return c.inner.Close() }

type allocator struct {
	c     *core
	inner backends.Allocator
}

func (a allocator) Allocate(ctx context.Context, keys []string, sizes []int) (backends.Staged, error) {
	ft, err := a.c.f.begin(ctx, OpAllocate, len(keys))
	if err != nil {
		return nil, err
	}
	if ft != nil {
		return nil, ft.err
	}
	in, err := a.inner.Allocate(ctx, keys, sizes)
	if err != nil {
		return nil, err
	}
	st := &staged{f: a.c.f, inner: in, n: len(keys)}
	if tr, ok := in.(backends.TagReporter); ok {
		return reportingStaged{st, tr}, nil
	}
	return st, nil
}

// staged counts and fails Publish and Discard. A failed Publish leaves the
// inner Staged unpublished, so the caller may still Discard it (or Publish
// again, which reaches the inner Staged unless another fault fires).
type staged struct {
	f     *Faulty
	inner backends.Staged
	n     int
}

func (s *staged) Buffers() [][]byte { return s.inner.Buffers() }

func (s *staged) Publish(ctx context.Context) error {
	ft, err := s.f.begin(ctx, OpPublish, s.n)
	if err != nil {
		return err
	}
	if ft != nil {
		return ft.err
	}
	return s.inner.Publish(ctx)
}

func (s *staged) Discard(ctx context.Context) error {
	ft, err := s.f.begin(ctx, OpDiscard, s.n)
	if err != nil {
		return err
	}
	if ft != nil {
		return ft.err
	}
	return s.inner.Discard(ctx)
}

type reportingStaged struct {
	*staged
	tr backends.TagReporter
}

func (s reportingStaged) Tags() []string { return s.tr.Tags() }

type taggedWriter struct {
	c     *core
	inner backends.TaggedWriter
}

func (w taggedWriter) PutTagged(ctx context.Context, keys []string, values [][]byte) ([]string, error) {
	ft, err := w.c.f.begin(ctx, OpPut, len(keys))
	if err != nil {
		return nil, err
	}
	if ft != nil {
		return nil, ft.putThrough(func(n int) error {
			_, err := w.inner.PutTagged(ctx, keys[:n], values[:n])
			return err
		}, keys, len(values))
	}
	return w.inner.PutTagged(ctx, keys, values)
}

type taggedReader struct {
	c     *core
	inner backends.TaggedReader
}

func (r taggedReader) GetTagged(ctx context.Context, keys, tags []string) ([][]byte, error) {
	ft, err := r.c.f.begin(ctx, OpGet, len(keys))
	if err != nil {
		return nil, err
	}
	if ft != nil {
		return nil, ft.err
	}
	return r.inner.GetTagged(ctx, keys, tags)
}

// wrapSplit wraps an inner backend that has SplitReader or SplitWriter
// and no tagged interface, or returns nil.
func wrapSplit(c *core, inner backends.Backend) backends.Backend {
	_, w := inner.(backends.TaggedWriter)
	_, r := inner.(backends.TaggedReader)
	_, d := inner.(backends.TaggedDeleter)
	ir, isR := inner.(backends.SplitReader)
	iw, isW := inner.(backends.SplitWriter)
	if w || r || d || !isR && !isW {
		return nil
	}
	ia, isA := inner.(backends.Allocator)
	type (
		B  = backends.Backend
		A  = backends.Allocator
		SR = backends.SplitReader
		SW = backends.SplitWriter
	)
	a, sr, sw := allocator{c, ia}, splitReader{c, ir}, splitWriter{c, iw}
	switch {
	case isA && isR && isW:
		return struct {
			B
			A
			SR
			SW
		}{c, a, sr, sw}
	case isA && isR:
		return struct {
			B
			A
			SR
		}{c, a, sr}
	case isA:
		return struct {
			B
			A
			SW
		}{c, a, sw}
	case isR && isW:
		return struct {
			B
			SR
			SW
		}{c, sr, sw}
	case isR:
		return struct {
			B
			SR
		}{c, sr}
	default:
		return struct {
			B
			SW
		}{c, sw}
	}
}

type splitWriter struct {
	c     *core
	inner backends.SplitWriter
}

func (w splitWriter) PutSplit(ctx context.Context, keys []string, heads, bodies [][]byte) error {
	ft, err := w.c.f.begin(ctx, OpPut, len(keys))
	if err != nil {
		return err
	}
	if ft != nil {
		if len(heads) != len(bodies) {
			return fmt.Errorf("%w: %d heads, %d bodies", backends.ErrInvalid, len(heads), len(bodies))
		}
		return ft.putThrough(func(n int) error { return w.inner.PutSplit(ctx, keys[:n], heads[:n], bodies[:n]) }, keys, len(heads))
	}
	return w.inner.PutSplit(ctx, keys, heads, bodies)
}

type splitReader struct {
	c     *core
	inner backends.SplitReader
}

func (r splitReader) GetSplit(ctx context.Context, keys []string, dst []backends.SplitValue) error {
	ft, err := r.c.f.begin(ctx, OpGet, len(keys))
	if err != nil {
		return err
	}
	if ft != nil {
		return ft.err
	}
	return r.inner.GetSplit(ctx, keys, dst)
}

type taggedDeleter struct {
	c     *core
	inner backends.TaggedDeleter
}

func (d taggedDeleter) DeleteTagged(ctx context.Context, keys, tags []string) error {
	ft, err := d.c.f.begin(ctx, OpDelete, len(keys))
	if err != nil {
		return err
	}
	if ft != nil {
		return ft.err
	}
	return d.inner.DeleteTagged(ctx, keys, tags)
}
