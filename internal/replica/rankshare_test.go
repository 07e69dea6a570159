package replica_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/backendtest/toylog"
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

// A rank's claim whose reply is in flight while the log is compacted past
// its record and another call of its process reads the log (its copy
// restarts from the snapshot, which holds the claim's effect, not its
// result) still returns its share: found by the claim's token in the
// batch the snapshot lists. Whether the claim opened the batch or took a
// share of one another rank opened. Before, the claim's outcome was
// unknown and the share could not be handed back (the other rank holds
// the batch under the same lease): a claim made again found nothing, and
// the step waited for the lease to end.
func TestRankClaimResultLostToCompaction(t *testing.T) {
	for _, opens := range []bool{true, false} {
		srv := toylog.NewServer(nil)
		held := &heldAppend{appended: make(chan struct{}), release: make(chan struct{})}
		a := client(t, srv, nil)
		b := client(t, srv, func(l backends.Log) backends.Log { held.Log = l; return held })
		ta, tb := rankOfTwo(t, a, 0), rankOfTwo(t, b, 1)
		put(t, a, "p", "r0", "r1", "r2", "r3")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var la *tq.Lease
		var err error
		if !opens {
			if la, err = ta.Claim(ctx, 4, tq.AtLeast(4)); err != nil || la.Len() != 2 {
				t.Fatalf("rank 0 opening the batch: %v, %v", la, err)
			}
		}
		type result struct {
			l   *tq.Lease
			err error
		}
		got := make(chan result, 1)
		// Rank 1's copy sees the rows (its sampler picks on it).
		if _, err := b.Status(ctx, "p"); err != nil {
			t.Fatal(err)
		}
		held.armed.Store(true)
		go func() {
			l, err := tb.Claim(ctx, 4, tq.AtLeast(4))
			got <- result{l, err}
		}()
		select {
		case <-held.appended:
		case r := <-got:
			t.Fatalf("opens %v: rank 1's claim returned before its append: %v, %v", opens, r.l, r.err)
		}
		compactAll(t, srv.Engine().Log, "p")
		// Another call of rank 1's process reads the log meanwhile: its
		// copy restarts from the snapshot, past the claim's record.
		if _, err := b.Status(ctx, "p"); err != nil {
			t.Fatal(err)
		}
		close(held.release)
		r := <-got
		if r.err != nil {
			t.Fatalf("opens %v: rank 1's claim, its result lost to a compaction: %v (its share held by no one for the lease)", opens, r.err)
		}
		if opens {
			if la, err = ta.Claim(ctx, 4, tq.AtLeast(4)); err != nil {
				t.Fatal(err)
			}
		}
		cancel()
		all := append(la.Keys(), r.l.Keys()...)
		slices.Sort(all)
		if !slices.Equal(all, []string{"r0", "r1", "r2", "r3"}) || la.Len() != 2 || r.l.Len() != 2 {
			t.Fatalf("opens %v: rank 0's share %q and rank 1's %q; want the 4 rows between them, 2 each", opens, la.Keys(), r.l.Keys())
		}
		for _, l := range []*tq.Lease{la, r.l} {
			if !slices.Equal(l.Deliveries, []int{1, 1}) {
				t.Fatalf("opens %v: a share delivered %v times; want once each", opens, l.Deliveries)
			}
		}
	}
}

// rankOfTwo is rank r of 2 of task t of partition p on c, as the GRPO
// trainer's sampler takes them: the ready rows once there are 4, each a
// unit; leases of a minute.
func rankOfTwo(t *testing.T, c *tq.Client, r int) *tq.Task {
	t.Helper()
	four := tq.SamplerFunc(func(ready []tq.Candidate, n int) ([][]int, []int) {
		if len(ready) < 4 {
			return nil, nil
		}
		return [][]int{{0}, {1}, {2}, {3}}, nil
	})
	task, err := c.Task("p", "t", []string{"x"}, tq.WithSampler(four), tq.Ranks(2, r, ""), tq.LeaseFor(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	return task
}
