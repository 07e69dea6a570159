package tq_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/backendtest"
	"github.com/tqgo/tqgo/backends/memory"
	"github.com/tqgo/tqgo/tq"
)

func faultyClient(t *testing.T, f *backendtest.Faulty, opts ...tq.Option) *tq.Client {
	eng := backendtest.Wrap(backends.Engine{Data: memory.New(), Meta: memory.NewMetaStore()}, f)
	return engClient(t, eng, opts...)
}

// A handler that acks its rows one by one while Consume extends the lease
// is not taken for one that lost it: every row ends acked, none
// redelivered.
func TestConsumeAckWhileExtending(t *testing.T) {
	f := new(backendtest.Faulty)
	c := faultyClient(t, f)
	keys := make([]string, 10)
	for i := range keys {
		keys[i] = fmt.Sprint("k", i)
	}
	putA(t, c, "p", keys)
	tk, err := c.Task("p", "t", []string{"a"}, tq.LeaseFor(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	f.SetDelay(backendtest.OpSettle, 40*time.Millisecond)
	ctx, cancel := context.WithCancel(t.Context())
	var lost atomic.Int32
	done := make(chan error)
	go func() {
		done <- tk.Consume(ctx, 10, func(hctx context.Context, l *tq.Lease) error {
			ks := l.Keys()
			for _, k := range ks[:len(ks)-1] {
				if err := l.Ack(context.WithoutCancel(hctx), k); err != nil {
					t.Logf("handler ack %s: %v", k, err)
				}
				if errors.Is(context.Cause(hctx), tq.ErrLeaseLost) {
					lost.Add(1)
					t.Logf("handler ctx cancelled: %v", context.Cause(hctx))
					return nil
				}
			}
			return nil // k9 left for Consume to ack
		})
	}()
	time.Sleep(1500 * time.Millisecond) // nine acks of 40 ms: longer than the lease, shorter than this
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	st, _ := tk.Status(t.Context())
	t.Logf("lost=%d status: acked=%d leased=%d ready=%d redelivered=%d", lost.Load(), st.Acked, st.Leased, st.Ready, st.Redelivered)
	if lost.Load() > 0 || st.Acked != 10 {
		t.Errorf("handler succeeded but rows not acked: lost=%d acked=%d", lost.Load(), st.Acked)
	}
}

var errDown = fmt.Errorf("connection refused: %w", backends.ErrUnavailable)

// A Wait whose ctx ends while the engine is unavailable returns ctx's
// error, not one matching ErrUnavailable.
func TestWaitCtxEndsDuringRetry(t *testing.T) {
	f := new(backendtest.Faulty)
	c := faultyClient(t, f)
	tk, err := c.Task("p", "t", []string{"a"})
	if err != nil {
		t.Fatal(err)
	}
	f.FailAll(backendtest.OpWait, errDown)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err = tk.Wait(ctx, 1)
	t.Logf("err %v", err)
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, tq.ErrUnavailable) {
		t.Errorf("Wait whose ctx ended: %v, want ctx's error, not ErrUnavailable", err)
	}
}

// A stall check whose View fails looks again a bound later: the Wait does
// not spin claiming and viewing.
func TestStallViewErrorDoesNotSpin(t *testing.T) {
	f := new(backendtest.Faulty)
	c := faultyClient(t, f)
	putA(t, c, "p", []string{"r0"})
	tk, err := c.Task("p", "t", []string{"a", "b"}, tq.Stall(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	go func() { time.Sleep(20 * time.Millisecond); f.FailAll(backendtest.OpConsumption, nil) }()
	f.ResetCounts()
	_, err = tk.Wait(ctx, 1)
	t.Logf("err %v; claims %d, views %d in 200ms", err, f.Calls(backendtest.OpClaim), f.Calls(backendtest.OpConsumption))
	if f.Calls(backendtest.OpClaim) > 20 {
		t.Errorf("Wait spins: %d claims", f.Calls(backendtest.OpClaim))
	}
}

// While Extend retries through an outage, the handler's context ends with
// ErrLeaseLost once the lease ends, not once the retry policy gives up.
func TestConsumeLeaseEndsUnextended(t *testing.T) {
	f := new(backendtest.Faulty)
	c := faultyClient(t, f, tq.WithRetry(tq.RetryPolicy{For: 3 * time.Second}))
	putA(t, c, "p", []string{"r0"})
	tk, err := c.Task("p", "t", []string{"a"}, tq.LeaseFor(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	res := make(chan time.Duration, 1)
	go func() {
		_ = tk.Consume(ctx, 1, func(hctx context.Context, l *tq.Lease) error {
			start := time.Now()
			f.FailAll(backendtest.OpSettle, errDown) // this consumer is cut off from now
			<-hctx.Done()
			res <- time.Since(start)
			cancel()
			return hctx.Err()
		})
	}()
	d := <-res
	t.Logf("handler cancelled %v after its lease began (lease 300ms)", d)
	if d > time.Second {
		t.Errorf("handler ran %v on a lease of 300ms", d)
	}
}
