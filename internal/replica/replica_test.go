package replica_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/backendtest/toylog"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/internal/replica"
	"github.com/tqgo/tqgo/internal/rules"
	"github.com/tqgo/tqgo/tq"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) } // ants starts its default pool at init

// client opens a tq client over srv whose metadata is a replica with
// opts: a process of its own.
func client(t testing.TB, srv *toylog.Server, log func(backends.Log) backends.Log, opts ...replica.Option) *tq.Client {
	t.Helper()
	e := srv.Engine()
	l := e.Log
	if log != nil {
		l = log(l)
	}
	m := replica.NewStore(l, e.Data, opts...)
	c, err := tq.New(backends.Engine{Data: e.Data, Meta: m})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Close()
		_ = m.Close()
		_ = e.Close()
	})
	return c
}

func put(t testing.TB, c *tq.Client, p string, keys ...string) {
	t.Helper()
	vals := make([]int64, len(keys))
	if err := c.BatchPut(context.Background(), p, keys, tq.Batch{"x": tq.Stacked(vals)}, nil); err != nil {
		t.Fatal(err)
	}
}

func keys(n int, prefix string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%03d", prefix, i)
	}
	return out
}

// A log compacted after every write still gives a new process the whole
// state: rows and consumption, from the snapshot and the entries after it.
func TestCompaction(t *testing.T) {
	ctx := context.Background()
	srv := toylog.NewServer(nil)
	a := client(t, srv, nil, replica.CompactAfter(1))
	for i := range 20 {
		put(t, a, "p", keys(10, fmt.Sprint("r", i, "-"))...)
	}
	task, err := a.Task("p", "t", []string{"x"})
	if err != nil {
		t.Fatal(err)
	}
	l, err := task.Claim(ctx, 30)
	if err != nil || l.Len() != 30 {
		t.Fatalf("claim: %v, %v", l, err)
	}
	if err := l.Ack(ctx, l.Keys()[:10]...); err != nil {
		t.Fatal(err)
	}
	// The log holds a snapshot and few entries.
	// Compaction waits until the entries after a snapshot outweigh it, so
	// that it costs a constant share of what is appended.
	var tail backends.Tail
	logged := 0
	for deadline := time.Now().Add(5 * time.Second); ; {
		if tail, err = srv.Engine().Log.Read(ctx, "p", backends.Pos{}, 0); err != nil {
			t.Fatal(err)
		}
		logged = 0
		for _, e := range tail.Entries {
			logged += len(e.Data)
		}
		if tail.Snapshot != nil && logged <= 2*len(tail.Snapshot) || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if tail.Snapshot == nil || logged > 2*len(tail.Snapshot) {
		t.Fatalf("after 42 writes: snapshot of %d bytes, then %d entries of %d bytes", len(tail.Snapshot), len(tail.Entries), logged)
	}
	b := client(t, srv, nil)
	rows, err := b.List(ctx, "p")
	if err != nil || len(rows.Rows) != 200 {
		t.Fatalf("a new process lists %v rows, %v; want 200", rows, err)
	}
	st, err := b.Status(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	ts := st.Tasks["t"]
	if ts.Acked != 10 || ts.Leased != 20 {
		t.Fatalf("a new process sees task t %+v, want 10 acked, 20 leased", ts)
	}
	// And goes on from there: the next claim takes the next rows.
	tb, _ := b.Task("p", "t", []string{"x"})
	l2, err := tb.Claim(ctx, 5)
	if err != nil || l2.Len() != 5 || l2.Keys()[0] != "r3-000" {
		t.Fatalf("claim after restore: %v, %v", l2.Keys(), err)
	}
}

// waitNoLogs waits up to 5 s for srv to list no partition's log.
func waitNoLogs(t *testing.T, srv *toylog.Server) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		names, err := srv.Engine().Log.Partitions(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if len(names) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("logs left after the partition emptied: %v", names)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A partition cleared and reclaimed leaves no log behind.
func TestEmptyLogDeleted(t *testing.T) {
	ctx := context.Background()
	srv := toylog.NewServer(nil)
	a := client(t, srv, nil)
	put(t, a, "gone", "a", "b")
	if err := a.ClearPartition(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Reclaim(ctx, "gone", 0); err != nil {
		t.Fatal(err)
	}
	waitNoLogs(t, srv)
	put(t, a, "gone", "c") // a new log
	rows, err := client(t, srv, nil).List(ctx, "gone")
	if err != nil || len(rows.Rows) != 1 || rows.Rows[0].Key != "c" {
		t.Fatalf("after the log began anew: %v, %v", rows, err)
	}
}

// lossy is a Log whose next Append (when armed) loses its reply: applied
// or not (drop), the caller sees ErrOutcomeUnknown. With hold, the append
// is held back until release, and lands after whatever the caller does
// meanwhile: a copy of a request still on its way.
type lossy struct {
	backends.Log
	mu      sync.Mutex
	armed   bool
	drop    bool
	hold    chan struct{}
	landed  chan error
	appends int
}

func (l *lossy) Append(ctx context.Context, partition string, from backends.Pos, recs []backends.Record) (backends.Tail, error) {
	l.mu.Lock()
	armed, drop, hold := l.armed, l.drop, l.hold
	l.armed = false
	l.appends++
	l.mu.Unlock()
	if !armed {
		return l.Log.Append(ctx, partition, from, recs)
	}
	if hold != nil {
		go func() {
			<-hold
			_, err := l.Log.Append(context.Background(), partition, from, recs)
			l.landed <- err
		}()
		return backends.Tail{}, fmt.Errorf("%w: held", backends.ErrOutcomeUnknown)
	}
	if !drop {
		if _, err := l.Log.Append(ctx, partition, from, recs); err != nil {
			return backends.Tail{}, err
		}
	}
	return backends.Tail{}, fmt.Errorf("%w: reply lost", backends.ErrOutcomeUnknown)
}

func (l *lossy) arm(drop bool, hold chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.armed, l.drop, l.hold = true, drop, hold
}

// A write whose reply was lost is settled: applied (its entry came before
// the fence), or not (the fence voids it), never of unknown outcome while
// the log answers.
func TestLostReply(t *testing.T) {
	ctx := context.Background()
	srv := toylog.NewServer(nil)
	var lo *lossy
	a := client(t, srv, func(l backends.Log) backends.Log { lo = &lossy{Log: l}; return lo })
	b := client(t, srv, nil)

	lo.arm(false, nil) // the commit applies, its reply is lost
	put(t, a, "p", "applied")
	lo.arm(true, nil) // the next append never reaches the log
	if err := a.BatchPut(ctx, "p", []string{"dropped"}, tq.Batch{"x": tq.Stacked([]int64{1})}, nil); err == nil || errors.Is(err, tq.ErrOutcomeUnknown) {
		t.Fatalf("a put whose prepare never reached the log: %v, want a definite error", err)
	}
	rows, err := b.List(ctx, "p")
	if err != nil || len(rows.Rows) != 1 || rows.Rows[0].Key != "applied" {
		t.Fatalf("another process lists %v, %v; want the applied row alone", rows, err)
	}

	// A claim whose reply is lost: the lease is found, not doubled.
	task, _ := a.Task("p", "t", []string{"x"})
	lo.arm(false, nil)
	l, err := task.Claim(ctx, 1)
	if err != nil || l.Len() != 1 {
		t.Fatalf("a claim whose reply was lost: %v, %v", l, err)
	}
	if err := l.Ack(ctx); err != nil {
		t.Fatalf("ack of the lease the settled claim returned: %v", err)
	}
}

// A copy of a write that lands after the fence that settled it applies
// nothing: the fence voided it.
func TestFenceVoidsLateCopy(t *testing.T) {
	ctx := context.Background()
	srv := toylog.NewServer(nil)
	var lo *lossy
	a := client(t, srv, func(l backends.Log) backends.Log { lo = &lossy{Log: l, landed: make(chan error, 1)}; return lo })
	b := client(t, srv, nil)
	put(t, a, "p", "a")
	task, _ := a.Task("p", "t", []string{"x"})
	hold := make(chan struct{})
	lo.arm(false, hold)
	_, err := task.Claim(ctx, 1)
	if err == nil || errors.Is(err, tq.ErrOutcomeUnknown) {
		t.Fatalf("a claim held back, settled by a fence: %v, want a definite error", err)
	}
	close(hold)
	if err := <-lo.landed; err != nil {
		t.Fatal(err)
	}
	tb, _ := b.Task("p", "t", []string{"x"})
	l, err := tb.Claim(ctx, 1)
	if err != nil || l.Len() != 1 {
		t.Fatalf("the row after the voided claim landed: %v, %v; want it ready", l, err)
	}
}

// Waits share one watcher per partition, wake on another process's
// commit, and end at Close; nothing is left running.
func TestWaitWatcher(t *testing.T) {
	ctx := context.Background()
	srv := toylog.NewServer(nil)
	a := client(t, srv, nil)
	b := client(t, srv, nil)
	task, _ := a.Task("w", "t", []string{"x"})
	got := make(chan error, 3)
	for range 3 {
		go func() {
			l, err := task.Wait(ctx, 1)
			if err == nil && l.Len() != 1 {
				err = fmt.Errorf("a lease of %d rows", l.Len())
			}
			got <- err
		}()
	}
	time.Sleep(50 * time.Millisecond)
	put(t, b, "w", "k1", "k2", "k3")
	for range 3 {
		select {
		case err := <-got:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a Wait did not wake on another process's commit")
		}
	}
	// Close ends a Wait at once.
	go func() {
		_, err := task.Wait(ctx, 1)
		got <- err
	}()
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	_ = a.Close()
	select {
	case err := <-got:
		if !errors.Is(err, tq.ErrClosed) {
			t.Fatalf("a Wait at Close: %v, want ErrClosed", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Close did not end a Wait")
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Close took %v with a Wait", d)
	}
}

// A Wait on a partition with no rows does not spin: its claim's record
// makes a log the rules find empty (and delete), which wakes nobody.
func TestWaitEmptyNoSpin(t *testing.T) {
	srv := toylog.NewServer(nil)
	var lo *lossy
	a := client(t, srv, func(l backends.Log) backends.Log { lo = &lossy{Log: l}; return lo })
	task, _ := a.Task("empty", "t", []string{"x"})
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	if _, err := task.Wait(ctx, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait on an empty partition: %v, want its ctx's end", err)
	}
	lo.mu.Lock()
	n := lo.appends
	lo.mu.Unlock()
	if n > 3 {
		t.Fatalf("a Wait on an empty partition appended %d records in 700ms", n)
	}
}

// A custom sampler's claim sees a lease that ended with nothing appended
// since: its candidates are taken as of now by the log's clock, not as of
// the last record.
func TestCustomClaimSeesLapsedLease(t *testing.T) {
	srv := toylog.NewServer(nil)
	c := client(t, srv, nil)
	ctx := t.Context()
	if err := c.Put(ctx, "p", "r0", map[string]any{"a": int64(1)}, nil); err != nil {
		t.Fatal(err)
	}
	every := tq.SamplerFunc(func(ready []tq.Candidate, n int) ([][]int, []int) {
		var units [][]int
		for i := range ready[:min(n, len(ready))] {
			units = append(units, []int{i})
		}
		return units, nil
	})
	tk, err := c.Task("p", "t", []string{"a"}, tq.LeaseFor(100*time.Millisecond), tq.WithSampler(every))
	if err != nil {
		t.Fatal(err)
	}
	if l, err := tk.Claim(ctx, 1); err != nil || l.Len() != 1 {
		t.Fatalf("first claim: %v, %v", l, err)
	}
	time.Sleep(200 * time.Millisecond) // the lease ends; nothing is appended
	l, err := tk.Claim(ctx, 1)
	if err != nil || l.Len() != 1 || l.Deliveries[0] != 2 {
		t.Fatalf("claim after the lease ended: %v, %v; want the row, delivered a second time", l, err)
	}
}

// A ClearFields whose reply was lost is settled as a Delete is: applied
// (every process finds the field gone, the row kept), or not (the field
// stays), never of unknown outcome while the log answers.
func TestClearFieldsLostReply(t *testing.T) {
	ctx := context.Background()
	srv := toylog.NewServer(nil)
	var lo *lossy
	a := client(t, srv, func(l backends.Log) backends.Log { lo = &lossy{Log: l}; return lo })
	b := client(t, srv, nil)
	put(t, a, "p", "k")
	if err := a.BatchPut(ctx, "p", []string{"k"}, tq.Batch{"y": tq.Stacked([]int64{2})}, nil); err != nil {
		t.Fatal(err)
	}
	fieldsOf := func() []string {
		t.Helper()
		m, err := b.Lookup(ctx, "p", []string{"k"})
		if err != nil {
			t.Fatalf("another process's Lookup: %v", err)
		}
		var out []string
		for f := range m.Rows[0].Fields {
			out = append(out, f)
		}
		slices.Sort(out)
		return out
	}

	lo.arm(true, nil) // never reaches the log
	if err := a.ClearFields(ctx, "p", []string{"k"}, "y"); err == nil || errors.Is(err, tq.ErrOutcomeUnknown) {
		t.Fatalf("a ClearFields that never reached the log: %v, want a definite error", err)
	}
	if got := fieldsOf(); !slices.Equal(got, []string{"x", "y"}) {
		t.Fatalf("after a ClearFields that never applied: fields %q, want x y", got)
	}
	lo.arm(false, nil) // applies, its reply lost
	if err := a.ClearFields(ctx, "p", []string{"k"}, "y"); err != nil {
		t.Fatalf("a ClearFields whose reply was lost: %v, want it settled as applied", err)
	}
	if got := fieldsOf(); !slices.Equal(got, []string{"x"}) {
		t.Fatalf("after a ClearFields whose reply was lost: fields %q, want x", got)
	}
}

// A pick that panics (a caller's code: tq recovers its samplers, another
// caller of the MetaStore may not) goes on up to the caller with the
// partition's lock released: the next claim, a put and Close go on, and a
// Hold claim left nothing registered.
func TestPickPanicReleasesPartition(t *testing.T) {
	srv := toylog.NewServer(nil)
	e := srv.Engine()
	m := replica.NewStore(e.Log, e.Data)
	c, err := tq.New(backends.Engine{Data: e.Data, Meta: m})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.Close() }()
	put(t, c, "p", keys(4, "k")...)
	req := metadata.ClaimRequest{Task: "w", Lease: time.Minute, Rows: 2, Min: 1, Select: metadata.Select{Fields: []string{"x"}}, Custom: true, Hold: time.Second}
	panicked := func() (v any) {
		defer func() { v = recover() }()
		_, _ = m.Claim(t.Context(), "p", req, func([]*metadata.Row, []metadata.Delivery) (metadata.Picked, error) { panic("boom") })
		return nil
	}()
	if panicked != "boom" {
		t.Fatalf("the pick's panic: %v", panicked)
	}
	done := make(chan error, 1)
	go func() {
		req.Custom, req.Hold = false, 0
		got, err := m.Claim(t.Context(), "p", req, nil)
		if err == nil && len(got.Rows) != 2 {
			err = fmt.Errorf("leased %d rows, want 2", len(got.Rows))
		}
		if err == nil {
			err = c.Put(t.Context(), "p", "k9", map[string]any{"x": int64(1)}, nil)
		}
		if err == nil {
			err = c.Close()
		}
		if err == nil {
			err = m.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the partition stayed locked after a pick panicked")
	}
}

// A snapshot that does not decode fails a process's reads of the
// partition with an error matching tq.ErrCorrupt (backends.ErrCorrupt),
// not an internal one.
func TestCorruptSnapshot(t *testing.T) {
	srv := toylog.NewServer(nil)
	a := client(t, srv, nil)
	put(t, a, "p", keys(3, "k")...)
	e := srv.Engine()
	defer func() { _ = e.Close() }()
	tail, err := e.Log.Read(t.Context(), "p", backends.Pos{}, 0)
	if err != nil || len(tail.Entries) == 0 {
		t.Fatalf("read the log: %+v, %v", tail, err)
	}
	if err := e.Log.Compact(t.Context(), "p", tail.End(backends.Pos{}), []byte("not a snapshot")); err != nil {
		t.Fatal(err)
	}
	b := client(t, srv, nil)
	_, err = b.List(t.Context(), "p")
	if !errors.Is(err, tq.ErrCorrupt) || !errors.Is(err, backends.ErrCorrupt) || !strings.Contains(err.Error(), `"p"`) {
		t.Fatalf("List over a corrupt snapshot: %v, want ErrCorrupt naming the partition", err)
	}
}

// A custom claim picks on its process's copy: when rows were committed
// by another process between the copy the pick saw and where the claim's
// record lands, a Wait must not sleep past them (on the claim's mark,
// which counts them, until a lease or the registration's hold ends): it
// picks again at once on the copy caught up.
func TestWaitCustomPickedBehind(t *testing.T) {
	srv := toylog.NewServer(nil)
	a, b := client(t, srv, nil), client(t, srv, nil)
	// Offers rows only two at once, as an all-reduce's sampler does.
	pair := tq.SamplerFunc(func(ready []tq.Candidate, n int) ([][]int, []int) {
		if len(ready) < 2 {
			return nil, nil
		}
		return [][]int{{0, 1}}, nil
	})
	task, err := a.Task("p", "t", []string{"x"}, tq.WithSampler(pair), tq.LeaseFor(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	put(t, a, "p", "r0")
	put(t, b, "p", "r1") // a's copy does not know it yet
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := task.Wait(ctx, 2, tq.AtLeast(2))
	if err != nil {
		t.Fatalf("Wait for the two rows committed before it: %v", err)
	}
	if !slices.Equal(l.Keys(), []string{"r0", "r1"}) {
		t.Fatalf("Wait leased %q, want r0 and r1", l.Keys())
	}
}

// slowReply is a Log whose next Append (when armed) applies, and its
// reply takes delay: a request its caller's deadline may cut off.
type slowReply struct {
	backends.Log
	mu    sync.Mutex
	delay time.Duration
}

func (l *slowReply) Append(ctx context.Context, partition string, from backends.Pos, recs []backends.Record) (backends.Tail, error) {
	l.mu.Lock()
	d := l.delay
	l.delay = 0
	l.mu.Unlock()
	t, err := l.Log.Append(ctx, partition, from, recs)
	if d == 0 || err != nil {
		return t, err
	}
	select {
	case <-time.After(d):
		return t, nil
	case <-ctx.Done():
		return backends.Tail{}, fmt.Errorf("%w: %w", backends.ErrOutcomeUnknown, ctx.Err())
	}
}

// A Wait whose deadline cuts off its claim's request returns the
// deadline's error, never ErrOutcomeUnknown; the request goes on, and the
// lease it took, which its caller never received, goes back undelivered
// when its reply comes: another consumer claims the row long before the
// lease would end, as delivered once.
func TestWaitCutOffMidClaim(t *testing.T) {
	srv := toylog.NewServer(nil)
	var slow *slowReply
	a := client(t, srv, func(l backends.Log) backends.Log { slow = &slowReply{Log: l}; return slow })
	b := client(t, srv, nil)
	put(t, b, "p", "r0")
	opts := []tq.TaskOption{tq.LeaseFor(time.Minute), tq.MaxDeliveries(1)}
	ta, err := a.Task("p", "t", []string{"x"}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := b.Task("p", "t", []string{"x"}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	slow.mu.Lock()
	slow.delay = 500 * time.Millisecond
	slow.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if l, err := ta.Wait(ctx, 1); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, tq.ErrOutcomeUnknown) {
		t.Fatalf("a Wait cut off mid-claim: %v, %v; want context.DeadlineExceeded", l, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		l, err := tb.Claim(context.Background(), 1)
		if err != nil {
			t.Fatal(err)
		}
		if l.Len() == 1 {
			if l.Deliveries[0] != 1 {
				t.Fatalf("the row came back with %d deliveries, want 1 (this one)", l.Deliveries[0])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the row the cut-off claim leased did not come back")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// gatedReads is a Log whose blocking reads (a watcher's) wait, once
// closed, until it is opened; at tells of each read so held.
type gatedReads struct {
	backends.Log
	mu     sync.Mutex
	closed bool
	open   chan struct{}
	at     chan struct{}
}

func (l *gatedReads) Read(ctx context.Context, partition string, from backends.Pos, wait time.Duration) (backends.Tail, error) {
	l.mu.Lock()
	held := l.closed && wait > 0
	l.mu.Unlock()
	if held {
		select {
		case l.at <- struct{}{}:
		default:
		}
		select {
		case <-l.open:
		case <-ctx.Done():
			return backends.Tail{}, ctx.Err()
		}
	}
	return l.Log.Read(ctx, partition, from, wait)
}

// compactAll replaces partition's whole log with a snapshot of the state
// it holds, as a writer's compaction does.
func compactAll(t *testing.T, l backends.Log, partition string) {
	t.Helper()
	if err := compactLog(l, partition); err != nil {
		t.Fatal(err)
	}
}

func compactLog(l backends.Log, partition string) error {
	ctx := context.Background()
	tail, err := l.Read(ctx, partition, backends.Pos{}, 0)
	if err != nil {
		return err
	}
	st, at := rules.New(), tail.Start
	if tail.Snapshot != nil {
		if st, err = rules.Restore(tail.Snapshot); err != nil {
			return err
		}
	}
	for i := range tail.Entries {
		st.Replay(&tail.Entries[i])
		at = tail.Entries[i].Pos()
	}
	if at == (backends.Pos{}) {
		return fmt.Errorf("log of %q: empty", partition)
	}
	snap, err := st.Snapshot()
	if err != nil {
		return err
	}
	return l.Compact(ctx, partition, at, snap)
}

// A rank's Wait whose share of a batch another rank opened was given it
// by a record its process never read (the log was compacted past that
// record before its watcher read on, so its copy restarted from the
// snapshot) still takes its share at once: it does not wait for the
// batch's lease to end, while the other rank, which holds its share,
// waits for it (an all-reduce).
func TestRankShareAcrossCompaction(t *testing.T) {
	srv := toylog.NewServer(nil)
	gate := &gatedReads{open: make(chan struct{}), at: make(chan struct{}, 1), closed: true}
	a := client(t, srv, nil)
	b := client(t, srv, func(l backends.Log) backends.Log { gate.Log = l; return gate })
	ta, tb := rankOfTwo(t, a, 0), rankOfTwo(t, b, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type result struct {
		l   *tq.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := tb.Wait(ctx, 4, tq.AtLeast(4))
		got <- result{l, err}
	}()
	select {
	case <-gate.at: // registered, and its watcher about to read the log
	case r := <-got:
		t.Fatalf("rank 1's Wait returned before any row: %v, %v", r.l, r.err)
	}
	put(t, a, "p", "r0", "r1", "r2", "r3")
	la, err := ta.Claim(ctx, 4, tq.AtLeast(4))
	if err != nil || la.Len() == 0 {
		t.Fatalf("rank 0's claim: %v, %v; want its share of the 4 rows", la, err)
	}
	compactAll(t, srv.Engine().Log, "p")
	gate.mu.Lock()
	gate.closed = false
	close(gate.open)
	gate.mu.Unlock()
	r := <-got
	if r.err != nil {
		t.Fatalf("rank 1's Wait, rank 0 holding its share of the batch under a lease of a minute: %v", r.err)
	}
	all := append(la.Keys(), r.l.Keys()...)
	slices.Sort(all)
	if !slices.Equal(all, []string{"r0", "r1", "r2", "r3"}) {
		t.Fatalf("rank 0's share %q and rank 1's %q, want the 4 rows between them", la.Keys(), r.l.Keys())
	}
}

// compactingLoss is a Log whose next Append, when armed, applies, then has
// the log compacted past it, and loses its reply: the writer's copy
// restarts from a snapshot holding the record, so the record's result is
// gone.
type compactingLoss struct {
	backends.Log
	armed atomic.Bool
}

func (l *compactingLoss) Append(ctx context.Context, partition string, from backends.Pos, recs []backends.Record) (backends.Tail, error) {
	tail, err := l.Log.Append(ctx, partition, from, recs)
	if err != nil || !l.armed.Swap(false) {
		return tail, err
	}
	if err := compactLog(l.Log, partition); err != nil {
		return backends.Tail{}, err
	}
	return backends.Tail{}, fmt.Errorf("%w: the reply was lost", backends.ErrOutcomeUnknown)
}

// A claim whose record leased rows where it landed, its result lost to
// its writer (the log compacted past the record before the writer read it
// back), does not leave them held by no one until the lease ends: what it
// did is handed back undelivered and the claim is made again, so a Wait
// takes the row at once, delivered once. (The GRPO example's advantage
// worker waited for such a lease, a step of one lease.)
func TestClaimResultLostToCompaction(t *testing.T) {
	srv := toylog.NewServer(nil)
	var lossy *compactingLoss
	a := client(t, srv, func(l backends.Log) backends.Log { lossy = &compactingLoss{Log: l}; return lossy })
	put(t, a, "p", "r0")
	for _, wait := range []bool{false, true} {
		task, err := a.Task("p", fmt.Sprint("t", wait), []string{"x"}, tq.LeaseFor(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		lossy.armed.Store(true)
		var l *tq.Lease
		if wait {
			l, err = task.Wait(ctx, 1)
		} else {
			l, err = task.Claim(ctx, 1)
		}
		if lossy.armed.Load() {
			t.Fatalf("wait %v: the claim's append was not the one losing its result", wait)
		}
		if errors.Is(err, tq.ErrOutcomeUnknown) {
			// Made again, as a caller does: the row must not be held
			// by the lost claim's lease.
			l, err = task.Wait(ctx, 1)
		}
		cancel()
		if err != nil {
			t.Fatalf("wait %v: a claim whose result the copy lost, then a Wait: %v (the row held by no one for a minute's lease)", wait, err)
		}
		if !slices.Equal(l.Keys(), []string{"r0"}) || l.Deliveries[0] != 1 {
			t.Fatalf("wait %v: leased %q, deliveries %v; want r0 delivered once", wait, l.Keys(), l.Deliveries)
		}
	}
}
