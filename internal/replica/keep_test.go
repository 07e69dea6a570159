package replica_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/backendtest/toylog"
	"github.com/tqgo/tqgo/internal/hook"
	"github.com/tqgo/tqgo/internal/replica"
	"github.com/tqgo/tqgo/tq"
)

// heldAppend is a Log whose next Append, when armed, appends, tells
// appended, and returns its reply only once release is closed: a reply in
// flight while other processes go on.
type heldAppend struct {
	backends.Log
	armed    atomic.Bool
	appended chan struct{}
	release  chan struct{}
}

func (l *heldAppend) Append(ctx context.Context, partition string, from backends.Pos, recs []backends.Record) (backends.Tail, error) {
	t, err := l.Log.Append(ctx, partition, from, recs)
	if !l.armed.Swap(false) {
		return t, err
	}
	close(l.appended)
	<-l.release
	return t, err
}

// compactsTold is a Log that tells of each Compact it made.
type compactsTold struct {
	backends.Log
	done chan backends.Pos
}

func (l *compactsTold) Compact(ctx context.Context, partition string, at backends.Pos, snapshot []byte) error {
	err := l.Log.Compact(ctx, partition, at, snapshot)
	if err == nil {
		select {
		case l.done <- at:
		default:
		}
	}
	return err
}

// A rank's claim whose reply is still in flight when another process,
// having read the claim's record, would compact the log past it, gets its
// share all the same: the other process leaves the entries it read in the
// log a while before it compacts past them, so that a read by another
// call of the rank's process meanwhile (here a Status) reads the claim's
// record rather than restart its copy from a snapshot holding the claim's
// effect without its result. (A rank's claim whose result is lost cannot
// be handed back, the other rank holding the batch under the same lease:
// the step waited for the lease to end.)
func TestRankClaimReplyOutlivesCompaction(t *testing.T) {
	srv := toylog.NewServer(nil)
	held := &heldAppend{appended: make(chan struct{}), release: make(chan struct{})}
	told := &compactsTold{done: make(chan backends.Pos, 16)}
	// Process a compacts after every write; b does not.
	a := client(t, srv, func(l backends.Log) backends.Log { told.Log = l; return told }, replica.CompactAfter(1))
	b := client(t, srv, func(l backends.Log) backends.Log { held.Log = l; return held })
	deferred, proceed := make(chan struct{}, 16), make(chan struct{})
	defer hook.SetCompactWait(func(string) {
		select {
		case deferred <- struct{}{}:
		default:
		}
		<-proceed
	})()
	proceeded := false
	defer func() {
		if !proceeded {
			close(proceed)
		}
	}()
	four := tq.SamplerFunc(func(ready []tq.Candidate, n int) ([][]int, []int) {
		if len(ready) < 4 {
			return nil, nil
		}
		return [][]int{{0}, {1}, {2}, {3}}, nil
	})
	rank := func(c *tq.Client, r int) *tq.Task {
		task, err := c.Task("p", "t", []string{"x"}, tq.WithSampler(four), tq.Ranks(2, r, ""), tq.LeaseFor(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		return task
	}
	ta, tb := rank(a, 0), rank(b, 1)
	put(t, b, "p", "r0", "r1", "r2", "r3")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// Rank 1 opens the batch; its claim's reply is held.
	type result struct {
		l   *tq.Lease
		err error
	}
	got := make(chan result, 1)
	held.armed.Store(true)
	go func() {
		l, err := tb.Claim(ctx, 4, tq.AtLeast(4))
		got <- result{l, err}
	}()
	select {
	case <-held.appended:
	case r := <-got:
		t.Fatalf("rank 1's claim returned before its append: %v, %v", r.l, r.err)
	}
	// Rank 0 takes its share: its process reads rank 1's record and
	// would compact past it.
	la, err := ta.Claim(ctx, 4, tq.AtLeast(4))
	if err != nil || la.Len() == 0 {
		t.Fatalf("rank 0's claim: %v, %v; want its share of the 4 rows", la, err)
	}
	compacted := false
	select {
	case <-deferred: // the compaction waits
	case <-told.done: // the compaction is in the log
		compacted = true
	case <-ctx.Done():
		t.Fatal("process a did not compact after its claim")
	}
	// Another call of rank 1's process reads the log meanwhile.
	if _, err := b.Status(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	close(held.release)
	r := <-got
	if r.err != nil {
		t.Fatalf("rank 1's claim, its reply in flight while the other process compacted: %v (its share held by no one for the lease)", r.err)
	}
	all := append(la.Keys(), r.l.Keys()...)
	slices.Sort(all)
	if !slices.Equal(all, []string{"r0", "r1", "r2", "r3"}) {
		t.Fatalf("rank 0's share %q and rank 1's %q, want the 4 rows between them", la.Keys(), r.l.Keys())
	}
	// The compaction goes on after its wait.
	proceeded = true
	close(proceed)
	if !compacted {
		select {
		case <-told.done:
		case <-ctx.Done():
			t.Fatal("process a's compaction did not reach the log after its wait")
		}
	}
	tail, err := srv.Engine().Log.Read(ctx, "p", backends.Pos{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !tail.Restart || tail.Snapshot == nil {
		t.Fatalf("after the compaction, a read from the start is %+v; want a snapshot", tail)
	}
}

// A process that closes while a snapshot of a partition waits to be
// stored, the partition cleared meanwhile, still leaves no log of it: the
// snapshot is stored, then the log emptied, as Close empties a log whose
// state is empty.
func TestCloseEmptiesAfterWaitingSnapshot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv := toylog.NewServer(nil)
	e := srv.Engine()
	defer e.Close()
	m := replica.NewStore(e.Log, e.Data, replica.CompactAfter(1))
	c, err := tq.New(backends.Engine{Data: e.Data, Meta: m})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	deferred, proceed := make(chan struct{}, 16), make(chan struct{})
	defer hook.SetCompactWait(func(string) {
		select {
		case deferred <- struct{}{}:
		default:
		}
		<-proceed
	})()
	proceeded := false
	defer func() {
		if !proceeded {
			close(proceed)
		}
		_ = m.Close()
	}()
	put(t, c, "p", "r0", "r1")
	select {
	case <-deferred:
	case <-ctx.Done():
		t.Fatal("no compaction after a put")
	}
	if err := c.Clear(ctx, "p", []string{"r0", "r1"}); err != nil {
		t.Fatal(err)
	}
	// A Wait on another partition tells when Close has begun.
	task, err := c.Task("q", "t", []string{"x"})
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() {
		_, err := task.Wait(ctx, 1)
		waited <- err
	}()
	closed := make(chan error, 1)
	go func() { closed <- m.Close() }()
	if err := <-waited; !errors.Is(err, tq.ErrClosed) && !errors.Is(err, backends.ErrClosed) {
		t.Fatalf("a Wait as its client's metadata closes: %v", err)
	}
	proceeded = true
	close(proceed)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	parts, err := srv.Engine().Log.Partitions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(parts, "p") {
		t.Fatalf("partitions with a log after the closed process cleared p: %q; want p's emptied", parts)
	}
}
