package tqserve_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/tq"
	"github.com/tqgo/tqgo/tqserve"
)

// callCounter counts the server's calls by method.
type callCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *callCounter) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	c.mu.Lock()
	c.n[info.FullMethod[strings.LastIndexByte(info.FullMethod, '/')+1:]]++
	c.mu.Unlock()
	return next(ctx, req)
}

func (c *callCounter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.n
	c.n = map[string]int{}
	return out
}

// Through a tq server, a worker's loop of Claim with Acking(previous
// lease) is one call per claim: the acks ride on it.
func TestAckingOneCall(t *testing.T) {
	for _, engine := range []string{"memory://tqserve-acking", "file://" + t.TempDir()} {
		cc := &callCounter{n: map[string]int{}}
		s := startServer(t, engine, tqserve.WithInterceptor(cc.intercept))
		c := openClient(t, s.URL)
		ctx := context.Background()
		for i := range 8 {
			if err := c.Put(ctx, "p", fmt.Sprintf("k%d", i), map[string]any{"x": int64(i)}, nil); err != nil {
				t.Fatal(err)
			}
		}
		task, err := c.Task("p", "w", []string{"x"})
		if err != nil {
			t.Fatal(err)
		}
		l, err := task.Claim(ctx, 2)
		if err != nil {
			t.Fatal(err)
		}
		cc.take()
		for range 3 {
			if l, err = task.Claim(ctx, 2, tq.Acking(l)); err != nil || l.Len() != 2 {
				t.Fatalf("%s: claim acking: %v, %v", engine, l, err)
			}
		}
		if got := cc.take(); got["Claim"] != 3 || len(got) != 1 {
			t.Fatalf("%s: 3 claims acking the lease before took calls %v, want 3 Claim calls alone", engine, got)
		}
	}
}

// Through a tq server, Consume's worker loop is one call per lease: the
// ack of a lease whose handler finished rides on the worker's next Wait,
// and every row ends acknowledged, the last lease's too once Consume
// stops.
func TestConsumeOneCallPerLease(t *testing.T) {
	cc := &callCounter{n: map[string]int{}}
	s := startServer(t, "memory://tqserve-consume-acking", tqserve.WithInterceptor(cc.intercept))
	c := openClient(t, s.URL)
	ctx := context.Background()
	const rows, per = 12, 2
	for i := range rows {
		if err := c.Put(ctx, "p", fmt.Sprintf("k%02d", i), map[string]any{"x": int64(i)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	task, err := c.Task("p", "w", []string{"x"})
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu     sync.Mutex
		leases int
		seen   = map[string]bool{}
		calls  map[string]int // the calls made by the time the last row was handed out
	)
	cc.take()
	err = task.Consume(cctx, per, func(_ context.Context, l *tq.Lease) error {
		mu.Lock()
		defer mu.Unlock()
		leases++
		for _, k := range l.Keys() {
			if seen[k] {
				t.Errorf("%s delivered twice", k)
			}
			seen[k] = true
		}
		if len(seen) == rows {
			calls = cc.take()
			cancel()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Every lease came from one Claim call (a Wait's first claim, which
	// carried the previous lease's ack); no Settle call went alone.
	if calls["Claim"] != leases || calls["Settle"] != 0 {
		t.Fatalf("%d leases took calls %v, want %d Claim calls and no Settle", leases, calls, leases)
	}
	st, err := task.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Acked != rows || st.Leased != 0 {
		t.Fatalf("after Consume: %d acked, %d leased, want %d acked (the last lease acked as Consume stopped)", st.Acked, st.Leased, rows)
	}
}

// A tq server deletes the cells of the rows that acks clear (the
// capacity's ClearAcked) and reports them swept itself: its client makes
// no call for them (no Swept, no delete of cells), the cells are gone
// soon after the ack returns, and a Reclaim finds nothing left.
func TestServerSweepsClearedRows(t *testing.T) {
	for name, engine := range engines(t) {
		if name == "file" {
			continue // the server holds the directory: its cells are read through it alone
		}
		t.Run(name, func(t *testing.T) {
			url := engine(t)
			cc := &callCounter{n: map[string]int{}}
			s := startServer(t, url, tqserve.WithInterceptor(cc.intercept))
			c := openClient(t, s.URL)
			ctx := context.Background()
			eng, err := backends.Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = eng.Data.Close() })
			const rows = 6
			task := clearAckedTask(t, c, rows)
			first, err := task.Claim(ctx, rows/2)
			if err != nil {
				t.Fatal(err)
			}
			second, err := task.Claim(ctx, rows/2)
			if err != nil {
				t.Fatal(err)
			}
			var cells []backends.ReadCell
			for _, l := range []*tq.Lease{first, second} {
				for _, r := range l.Meta.Rows {
					cells = append(cells, backends.ReadCell{Key: backends.StorageKey(r.Index, "x", 0)})
				}
			}
			if len(cells) != rows {
				t.Fatalf("claimed %d rows of %d", len(cells), rows)
			}
			found := func() int {
				t.Helper()
				for i := range cells {
					cells[i].Found, cells[i].Value = false, nil
				}
				if err := eng.Data.Read(ctx, cells); err != nil {
					t.Fatal(err)
				}
				n := 0
				for _, rc := range cells {
					if rc.Found {
						n++
					}
				}
				return n
			}
			if n := found(); n != rows {
				t.Fatalf("before the acks: %d of the %d rows' cells found", n, rows)
			}
			cc.take()
			// One ack riding on a claim (which finds no rows), one alone.
			if _, err := task.Claim(ctx, 1, tq.Acking(first)); err != nil {
				t.Fatal(err)
			}
			if err := second.Ack(ctx); err != nil {
				t.Fatal(err)
			}
			if got := cc.take(); got["Claim"] != 1 || got["Settle"] != 1 || len(got) != 2 {
				t.Fatalf("a claim acking and an ack clearing rows took calls %v, want one Claim and one Settle alone", got)
			}
			deadline := time.Now().Add(10 * time.Second)
			for found() > 0 {
				if time.Now().After(deadline) {
					t.Fatalf("10s after the acks, %d of the cleared rows' cells are still there", found())
				}
				time.Sleep(10 * time.Millisecond)
			}
			if calls := cc.take(); len(calls) != 0 {
				t.Fatalf("the client made calls %v after its acks, want none", calls)
			}
			// The server reports the cells swept after it deleted them.
			for tqserve.Sweeping(s.srv) > 0 {
				if time.Now().After(deadline) {
					t.Fatalf("10s after the acks, %d sweeps are not done", tqserve.Sweeping(s.srv))
				}
				time.Sleep(10 * time.Millisecond)
			}
			// Reported swept: a Reclaim finds nothing of them.
			rep, err := c.Reclaim(ctx, "p", time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Deleted != 0 || rep.Left != 0 {
				t.Fatalf("Reclaim after the sweep: %+v, want nothing to delete", rep)
			}
		})
	}
}

// A tq server reclaims the partitions it serves (WithReclaim): a put
// reserved and never committed (its client died mid-put) is aborted once
// older than the bound, its cell deleted, and its commit then fails with
// ErrConflict; committed rows keep theirs. No client calls Reclaim.
func TestServerReclaims(t *testing.T) {
	for name, engine := range engines(t) {
		t.Run(name, func(t *testing.T) {
			s := startServer(t, engine(t), tqserve.WithReclaim(300*time.Millisecond))
			ctx := context.Background()
			c := openClient(t, s.URL)
			if err := c.Put(ctx, "p", "kept", map[string]any{"x": int64(1)}, nil); err != nil {
				t.Fatal(err)
			}
			// The dead client's put: reserved, its cell written, never
			// committed.
			eng, err := backends.Open(ctx, s.URL)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = eng.Meta.Close(); _ = eng.Data.Close() })
			m := eng.Meta.(metadata.MetaStore)
			res, err := m.Prepare(ctx, "p", []string{"dead"}, []string{"x"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			key := backends.StorageKey(res[0].Index, "x", res[0].Gens["x"])
			if err := eng.Data.Write(ctx, []backends.Cell{{Key: key, Body: []byte("orphan")}}); err != nil {
				t.Fatal(err)
			}
			read := func() bool {
				t.Helper()
				cells := []backends.ReadCell{{Key: key}}
				if err := eng.Data.Read(ctx, cells); err != nil {
					t.Fatal(err)
				}
				return cells[0].Found
			}
			if !read() {
				t.Fatal("the dead put's cell is not there after its write")
			}
			deadline := time.Now().Add(10 * time.Second)
			for read() {
				if time.Now().After(deadline) {
					t.Fatal("10s after the put was abandoned (reclaim after 300ms), its cell is still there")
				}
				time.Sleep(20 * time.Millisecond)
			}
			_, err = m.Commit(ctx, "p", []metadata.RowUpdate{{Key: "dead", Index: res[0].Index,
				Fields: map[string]metadata.FieldInfo{"x": {Gen: res[0].Gens["x"]}}}})
			if !errors.Is(err, backends.ErrConflict) {
				t.Fatalf("commit of the reclaimed put: %v, want ErrConflict", err)
			}
			got, err := c.BatchGet(ctx, "p", []string{"kept"}, "x")
			if err != nil || got["x"].Len() != 1 || got["x"].Err() != nil {
				t.Fatalf("the committed row after the reclaim: %v, %v", got, err)
			}
		})
	}
}

// clearAckedTask puts rows one-field rows k0, k1, ... in partition "p",
// whose capacity clears the rows task "w" acked, and returns that task.
func clearAckedTask(t *testing.T, c *tq.Client, rows int) *tq.Task {
	t.Helper()
	ctx := context.Background()
	for i := range rows {
		if err := c.Put(ctx, "p", fmt.Sprintf("k%d", i), map[string]any{"x": int64(i)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.SetCapacity(ctx, "p", tq.Capacity{ClearAcked: []string{"w"}}); err != nil {
		t.Fatal(err)
	}
	task, err := c.Task("p", "w", []string{"x"})
	if err != nil {
		t.Fatal(err)
	}
	return task
}
