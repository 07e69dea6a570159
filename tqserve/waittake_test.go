package tqserve_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tqgo/tqgo/internal/hook"
	"github.com/tqgo/tqgo/tq"
	"github.com/tqgo/tqgo/tqserve"
	"github.com/tqgo/tqgo/tqserve/tqpb"
)

// parked returns a channel that receives once a Wait of partition is
// parked in the server (its replica's wait, past its mark check), until
// t ends.
func parked(t *testing.T, partition string) <-chan struct{} {
	ch := make(chan struct{}, 1)
	restore := hook.SetWaiting(func(p string) {
		if p == partition {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	})
	t.Cleanup(restore)
	return ch
}

// await returns once ch receives, or fails t.
func await(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("the consumer's Wait never parked in the server")
	}
}

// waitForPut has a consumer of the server at url Wait for one row of
// task w in partition p, parked in the server, then puts the row k as
// another client; it returns the Wait's lease, failing t unless it is k,
// delivered once. before runs after the Wait's setup, before the Wait.
func waitForPut(t *testing.T, url string, before func()) *tq.Lease {
	t.Helper()
	producer, consumer := openClient(t, url), openClient(t, url)
	ctx := t.Context()
	task, err := consumer.Task("p", "w", []string{"x"})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   *tq.Lease
		err error
	}
	done := make(chan result, 1)
	before()
	waits := parked(t, "p")
	go func() {
		l, err := task.Wait(ctx, 1)
		done <- result{l, err}
	}()
	await(t, waits)
	if err := producer.Put(ctx, "p", "k", map[string]any{"x": int64(1)}, nil); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the Wait did not return after the put")
	}
	if r.err != nil || r.l.Len() != 1 || r.l.Keys()[0] != "k" || r.l.Deliveries[0] != 1 {
		t.Fatalf("Wait: %v, %v; want the row k, delivered once", r.l, r.err)
	}
	return r.l
}

// Through a tq server, a Wait whose registered claim is fulfilled has its
// rows with the wake-up: each Wait call is answered by a lease or
// followed by one claim, never both (a claim replacing the registered
// one is not sent once the Wait's reply brought the lease).
func TestWaitTakesLeaseWithWakeUp(t *testing.T) {
	for name, engine := range engines(t) {
		t.Run(name, func(t *testing.T) {
			cc := &callCounter{n: map[string]int{}}
			s := startServer(t, engine(t), tqserve.WithInterceptor(cc.intercept))
			l := waitForPut(t, s.URL, func() { cc.take() })
			got := cc.take()
			if got["Wait"] < 1 || got["Claim"] != got["Wait"] {
				t.Fatalf("calls %v: want as many Claims as Waits (the registering claim, then one per wake-up without a lease)", got)
			}
			if err := l.Ack(t.Context()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A Wait's reply that took the registered claim's lease and was lost: the
// Wait still returns the row, delivered once (the lease taken for the
// lost reply goes back undelivered where the claim replacing the
// registered one lands).
func TestWaitTakeReplyLost(t *testing.T) {
	for name, engine := range engines(t) {
		t.Run(name, func(t *testing.T) {
			var mu sync.Mutex
			dropped := 0
			drop := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
				if !strings.HasSuffix(info.FullMethod, "/Wait") {
					return next(ctx, req)
				}
				resp, err := next(ctx, req)
				if r, ok := resp.(*tqpb.WaitReply); ok && err == nil && r.GetTaken() != nil {
					mu.Lock()
					defer mu.Unlock()
					if dropped == 0 {
						dropped++
						return nil, status.Error(codes.Unavailable, "test: the reply is lost")
					}
				}
				return resp, err
			}
			s := startServer(t, engine(t), tqserve.WithInterceptor(drop))
			l := waitForPut(t, s.URL, func() {})
			mu.Lock()
			n := dropped
			mu.Unlock()
			if n != 1 {
				t.Fatalf("%d Wait replies with a lease dropped, want 1", n)
			}
			if err := l.Ack(t.Context()); err != nil {
				t.Fatal(err)
			}
		})
	}
}
