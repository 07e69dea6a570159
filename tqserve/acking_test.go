package tqserve_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"

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
