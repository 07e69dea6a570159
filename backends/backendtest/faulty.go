package backendtest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
)

// Op names an engine method that [Faulty] counts, delays and can fail.
type Op int

const (
	OpWrite           Op = iota // Store.Write
	OpRead                      // Store.Read
	OpDelete                    // Store.Delete
	OpStage                     // Stager.Stage
	OpUnstage                   // Stager.Unstage: counted and delayed, never failed
	OpPrepare                   // MetaStore.Prepare
	OpCommit                    // MetaStore.Commit
	OpLookup                    // MetaStore.Lookup
	OpList                      // MetaStore.List
	OpPartitions                // MetaStore.Partitions
	OpDeleteRows                // MetaStore.Delete
	OpDeletePartition           // MetaStore.DeletePartition
	OpGarbage                   // MetaStore.Garbage
	OpSwept                     // MetaStore.Swept
	OpAbandon                   // MetaStore.Abandon
	OpWriteCommit               // Colocated.WriteCommit
	OpReadRows                  // Colocated.ReadRows
	OpClaim                     // Queue.Claim
	OpSettle                    // Queue.Settle
	OpConsumption               // Queue.Consumption
	OpReset                     // Queue.Reset
	OpWait                      // Queue.Wait
	OpCapacity                  // MetaStore.SetCapacity
	OpDeleteFields              // MetaStore.DeleteFields
	numOps
)

var opNames = [numOps]string{"Write", "Read", "Delete", "Stage", "Unstage",
	"Prepare", "Commit", "Lookup", "List", "Partitions", "DeleteRows", "DeletePartition",
	"Garbage", "Swept", "Abandon", "WriteCommit", "ReadRows",
	"Claim", "Settle", "Consumption", "Reset", "Wait", "Capacity", "DeleteFields"}

func (o Op) String() string {
	if o < 0 || o >= numOps {
		return fmt.Sprintf("Op(%d)", int(o))
	}
	return opNames[o]
}

// Faulty counts the calls a wrapped engine (see [Wrap]) receives and
// injects faults and delays into them, so tests of higher layers can see
// an engine fail without a server. The zero Faulty injects nothing and is
// ready to use.
//
// Counting: every call of an [Op] counts, failed or not, with the number
// of items it was given: cells for the Store and Stager methods and
// WriteCommit, keys for Prepare, Lookup, Delete and ReadRows, updates for
// Commit, refs for Swept and Abandon, rows for Claim (its request's Rows)
// and indexes for Settle and Reset, 0 for the others. Faults are set
// relative to the calls made so far: n = 1 is the next call. A fault
// replaces the call (the inner engine is not called) except where
// FailWriteAfter or FailAfter says otherwise. When several faults match
// one call, the first one set fires. Close is passed through, never
// counted or failed.
//
// Faulty is safe for concurrent use: faults and delays may be set, and
// counters read, while calls are in flight. Under concurrent calls, "the
// nth call" is the nth to start, and a one-shot fault fires on that call
// only.
type Faulty struct {
	mu  sync.Mutex // guards ops
	ops [numOps]opState
}

type opState struct {
	seq     int   // calls ever made; never reset, faults count from it
	calls   int   // calls since the last ResetCounts
	items   int   // items of those calls
	batches []int // item count of each of those calls, in order
	delay   time.Duration
	faults  []fault
}

type fault struct {
	at    int // the seq of the call that fails; 0 for every call
	err   error
	write int  // for OpWrite: cells written through before failing
	after bool // the inner engine is called, then the error returned
}

// FailNth makes the nth call of op from now (1 is the next) fail with an
// error wrapping err, or [ErrInjected] if err is nil, without reaching the
// inner engine. It panics if n < 1 or op is OpUnstage.
func (f *Faulty) FailNth(op Op, n int, err error) {
	if n < 1 {
		panic(fmt.Sprintf("backendtest: FailNth(%v, %d): n must be at least 1", op, n))
	}
	f.add(op, fault{at: n, err: err})
}

// FailAfter makes the nth call of op from now (1 is the next) reach the
// inner engine and then, whatever it did, return an error wrapping err (or
// [ErrInjected]) and zero results: a reply lost after the request was
// applied. Pass backends.ErrOutcomeUnknown to model a MetaStore write
// whose outcome the store could not settle. It panics if n < 1 or op is
// OpUnstage.
func (f *Faulty) FailAfter(op Op, n int, err error) {
	if n < 1 {
		panic(fmt.Sprintf("backendtest: FailAfter(%v, %d): n must be at least 1", op, n))
	}
	f.add(op, fault{at: n, err: err, after: true})
}

// FailWriteAfter makes the nth Store.Write from now (1 is the next) write
// its first cells cells through to the inner store (all of them if it has
// fewer) and then fail with an error wrapping err, or [ErrInjected] if err
// is nil, as a write that broke off part-way does. It panics if n < 1 or
// cells < 0.
func (f *Faulty) FailWriteAfter(n, cells int, err error) {
	if n < 1 || cells < 0 {
		panic(fmt.Sprintf("backendtest: FailWriteAfter(%d, %d): want n >= 1, cells >= 0", n, cells))
	}
	f.add(OpWrite, fault{at: n, err: err, write: cells})
}

// FailAll makes every call of op fail with an error wrapping err, or
// [ErrInjected] if err is nil, until [Faulty.Clear]. It panics if op is
// OpUnstage.
func (f *Faulty) FailAll(op Op, err error) {
	f.add(op, fault{err: err})
}

// add sets ft, whose at counts from now (0: every call).
func (f *Faulty) add(op Op, ft fault) {
	if op < 0 || op >= numOps || op == OpUnstage {
		panic(fmt.Sprintf("backendtest: fault on %v, which cannot fail", op))
	}
	if ft.err == nil {
		ft.err = ErrInjected
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s := &f.ops[op]
	if ft.at > 0 {
		ft.at += s.seq
	}
	s.faults = append(s.faults, ft)
}

// SetDelay makes every call of op wait d before doing anything (0 turns
// the delay off). A call whose context ends first returns the context's
// error (Unstage, which has none, waits d).
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

// Keys returns the number of items (cells, keys, updates or refs; see
// Faulty) the calls of op since the last ResetCounts were given, summed.
func (f *Faulty) Keys(op Op) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ops[op].items
}

// Batches returns the item count of each call of op since the last
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
		s.calls, s.items, s.batches = 0, 0, nil
	}
}

// begin counts a call of op with n items, waits out the op's delay, and
// returns the fault that fires on the call, if any. A non-nil error means
// the context ended during the delay.
func (f *Faulty) begin(ctx context.Context, op Op, n int) (*fault, error) {
	f.mu.Lock()
	s := &f.ops[op]
	s.seq++
	s.calls++
	s.items += n
	s.batches = append(s.batches, n)
	seq, delay := s.seq, s.delay
	var fired *fault
	for i, ft := range s.faults {
		if ft.at == seq || ft.at == 0 {
			fired = &ft
			fired.err = fmt.Errorf("backendtest: %v call %d: %w", op, seq, ft.err)
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

// do runs call as a call of op with n items, unless a fault replaces it.
// After an error, the caller returns zero results.
func (f *Faulty) do(ctx context.Context, op Op, n int, call func() error) error {
	ft, err := f.begin(ctx, op, n)
	switch {
	case err != nil:
		return err
	case ft == nil:
		return call()
	case ft.after:
		_ = call()
	}
	return ft.err
}

// Wrap returns eng with every call of its Data and Meta counted, delayed
// and failed as f says (a nil f is a fresh Faulty nobody configures). It
// loses no capability: the Data is a backends.Stager exactly when eng's
// is, the Meta a metadata.Colocated exactly when eng's is (nil when eng's
// is nil; one that is no metadata.MetaStore passes through unwrapped), and
// Local is kept. Staged handles pass through unchanged. An engine's Log passes through unwrapped (its calls are neither counted nor
// failed), a backends.LogCells still: cells it writes and reads with its
// records bypass the wrapped Data. One Faulty may wrap several engines; it
// then counts their calls together.
func Wrap(eng backends.Engine, f *Faulty) backends.Engine {
	if f == nil {
		f = new(Faulty)
	}
	out := backends.Engine{Local: eng.Local, Log: eng.Log}
	if eng.Data != nil {
		d := &store{f: f, inner: eng.Data}
		out.Data = d
		if st, ok := eng.Data.(backends.Stager); ok {
			out.Data = struct {
				backends.Store
				backends.Stager
			}{d, stager{f, st}}
		}
	}
	if inner, ok := eng.Meta.(metadata.MetaStore); ok {
		m := &meta{f: f, inner: inner}
		out.Meta = m
		if c, ok := inner.(metadata.Colocated); ok {
			out.Meta = colocated{m, c}
		}
	} else {
		out.Meta = eng.Meta // nil, or no MetaStore: for tq to refuse
	}
	return out
}

var (
	_ backends.Store     = (*store)(nil)
	_ backends.Stager    = stager{}
	_ metadata.MetaStore = (*meta)(nil)
	_ metadata.Colocated = colocated{}
)

type store struct {
	f     *Faulty
	inner backends.Store
}

func (s *store) Write(ctx context.Context, cells []backends.Cell) error {
	ft, err := s.f.begin(ctx, OpWrite, len(cells))
	switch {
	case err != nil:
		return err
	case ft == nil:
		return s.inner.Write(ctx, cells)
	case ft.after:
		_ = s.inner.Write(ctx, cells)
	case ft.write > 0:
		if err := s.inner.Write(ctx, cells[:min(ft.write, len(cells))]); err != nil {
			return err
		}
	}
	return ft.err
}

func (s *store) Read(ctx context.Context, cells []backends.ReadCell) error {
	return s.f.do(ctx, OpRead, len(cells), func() error { return s.inner.Read(ctx, cells) })
}

func (s *store) Delete(ctx context.Context, cells []backends.Cell) error {
	return s.f.do(ctx, OpDelete, len(cells), func() error { return s.inner.Delete(ctx, cells) })
}

func (s *store) Close() error { return s.inner.Close() }

type stager struct {
	f     *Faulty
	inner backends.Stager
}

func (s stager) Stage(ctx context.Context, cells []backends.Cell, sizes []int) error {
	return s.f.do(ctx, OpStage, len(cells), func() error { return s.inner.Stage(ctx, cells, sizes) })
}

func (s stager) Unstage(cells []backends.Cell) {
	_, _ = s.f.begin(context.Background(), OpUnstage, len(cells))
	s.inner.Unstage(cells)
}

type meta struct {
	f     *Faulty
	inner metadata.MetaStore
}

func (m *meta) Prepare(ctx context.Context, partition string, keys, fields []string, sizes []int64) (out []metadata.Reservation, err error) {
	err = m.f.do(ctx, OpPrepare, len(keys), func() (err error) {
		out, err = m.inner.Prepare(ctx, partition, keys, fields, sizes)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (m *meta) Commit(ctx context.Context, partition string, updates []metadata.RowUpdate) (res metadata.CommitResult, err error) {
	err = m.f.do(ctx, OpCommit, len(updates), func() (err error) {
		res, err = m.inner.Commit(ctx, partition, updates)
		return err
	})
	if err != nil {
		return metadata.CommitResult{}, err
	}
	return res, nil
}

// rows runs a call of op that returns rows.
func (m *meta) rows(ctx context.Context, op Op, n int, call func() ([]*metadata.Row, error)) (out []*metadata.Row, err error) {
	err = m.f.do(ctx, op, n, func() (err error) {
		out, err = call()
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (m *meta) Lookup(ctx context.Context, partition string, keys []string) ([]*metadata.Row, error) {
	return m.rows(ctx, OpLookup, len(keys), func() ([]*metadata.Row, error) { return m.inner.Lookup(ctx, partition, keys) })
}

func (m *meta) List(ctx context.Context, partition string) ([]*metadata.Row, error) {
	return m.rows(ctx, OpList, 0, func() ([]*metadata.Row, error) { return m.inner.List(ctx, partition) })
}

func (m *meta) Partitions(ctx context.Context) (out []string, err error) {
	err = m.f.do(ctx, OpPartitions, 0, func() (err error) {
		out, err = m.inner.Partitions(ctx)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (m *meta) Delete(ctx context.Context, partition string, keys []string) ([]*metadata.Row, error) {
	return m.rows(ctx, OpDeleteRows, len(keys), func() ([]*metadata.Row, error) { return m.inner.Delete(ctx, partition, keys) })
}

func (m *meta) DeletePartition(ctx context.Context, partition string) ([]*metadata.Row, error) {
	return m.rows(ctx, OpDeletePartition, 0, func() ([]*metadata.Row, error) { return m.inner.DeletePartition(ctx, partition) })
}

func (m *meta) Garbage(ctx context.Context, partition string, olderThan time.Duration) (out []metadata.Ref, err error) {
	err = m.f.do(ctx, OpGarbage, 0, func() (err error) {
		out, err = m.inner.Garbage(ctx, partition, olderThan)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (m *meta) Swept(ctx context.Context, partition string, refs []metadata.Ref) error {
	return m.f.do(ctx, OpSwept, len(refs), func() error { return m.inner.Swept(ctx, partition, refs) })
}

func (m *meta) Abandon(ctx context.Context, partition string, refs []metadata.Ref) error {
	return m.f.do(ctx, OpAbandon, len(refs), func() error { return m.inner.Abandon(ctx, partition, refs) })
}

func (m *meta) DeleteFields(ctx context.Context, partition string, keys, fields []string) (out []metadata.Ref, err error) {
	err = m.f.do(ctx, OpDeleteFields, len(keys), func() (err error) {
		out, err = m.inner.DeleteFields(ctx, partition, keys, fields)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (m *meta) Close() error { return m.inner.Close() }

func (m *meta) Claim(ctx context.Context, partition string, req metadata.ClaimRequest, pick metadata.Pick) (c metadata.Claimed, err error) {
	err = m.f.do(ctx, OpClaim, req.Rows, func() (err error) {
		c, err = m.inner.Claim(ctx, partition, req, pick)
		return err
	})
	if err != nil {
		return metadata.Claimed{}, err
	}
	return c, nil
}

func (m *meta) Settle(ctx context.Context, partition string, req metadata.SettleRequest) (res metadata.SettleResult, err error) {
	err = m.f.do(ctx, OpSettle, len(req.Indexes), func() (err error) {
		res, err = m.inner.Settle(ctx, partition, req)
		return err
	})
	if err != nil {
		return metadata.SettleResult{}, err
	}
	return res, nil
}

func (m *meta) Consumption(ctx context.Context, partition string, tasks ...string) (out map[string][]metadata.Delivery, err error) {
	err = m.f.do(ctx, OpConsumption, 0, func() (err error) {
		out, err = m.inner.Consumption(ctx, partition, tasks...)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (m *meta) View(ctx context.Context, partition string, tasks ...string) (out metadata.View, err error) {
	err = m.f.do(ctx, OpConsumption, 0, func() (err error) {
		out, err = m.inner.View(ctx, partition, tasks...)
		return err
	})
	if err != nil {
		return metadata.View{}, err
	}
	return out, nil
}

func (m *meta) Reset(ctx context.Context, partition, task string, indexes []uint64) error {
	return m.f.do(ctx, OpReset, len(indexes), func() error { return m.inner.Reset(ctx, partition, task, indexes) })
}

func (m *meta) SetCapacity(ctx context.Context, partition string, c metadata.Capacity) (out []*metadata.Row, err error) {
	err = m.f.do(ctx, OpCapacity, 0, func() (err error) {
		out, err = m.inner.SetCapacity(ctx, partition, c)
		return err
	})
	return out, err
}

func (m *meta) Wait(ctx context.Context, partition string, mark metadata.Mark) error {
	return m.f.do(ctx, OpWait, 0, func() error { return m.inner.Wait(ctx, partition, mark) })
}

type colocated struct {
	*meta
	inner metadata.Colocated
}

func (c colocated) WriteCommit(ctx context.Context, partition string, cells []backends.Cell, updates []metadata.RowUpdate) (res metadata.CommitResult, err error) {
	err = c.f.do(ctx, OpWriteCommit, len(cells), func() (err error) {
		res, err = c.inner.WriteCommit(ctx, partition, cells, updates)
		return err
	})
	if err != nil {
		return metadata.CommitResult{}, err
	}
	return res, nil
}

func (c colocated) ReadRows(ctx context.Context, partition string, keys []string, plan func(rows []*metadata.Row) ([]backends.ReadCell, error)) (out []*metadata.Row, err error) {
	err = c.f.do(ctx, OpReadRows, len(keys), func() (err error) {
		out, err = c.inner.ReadRows(ctx, partition, keys, plan)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
