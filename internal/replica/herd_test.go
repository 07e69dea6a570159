package replica_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends/backendtest/toylog"
	"github.com/tqgo/tqgo/internal/hook"
	"github.com/tqgo/tqgo/tq"
)

// herd is a partition with one row leased to task busy and Waits of task
// idle blocked on it (no row is ready for idle).
type herd struct {
	lease  *tq.Lease     // busy's lease of the row
	sleeps *atomic.Int64 // times a Wait of the partition went to sleep
}

// blockedWaits makes a herd of n Waits on partition p of a client of a
// new toy log, and returns once each is asleep. The Waits end with tb.
func blockedWaits(tb testing.TB, p string, n int) *herd {
	tb.Helper()
	ctx := context.Background()
	c := client(tb, toylog.NewServer(nil), nil)
	put(tb, c, p, "k")
	busy, err := c.Task(p, "busy", []string{"x"})
	if err != nil {
		tb.Fatal(err)
	}
	l, err := busy.Claim(ctx, 1)
	if err != nil || l.Len() != 1 {
		tb.Fatalf("claim: %v", err)
	}
	h := &herd{lease: l, sleeps: new(atomic.Int64)}
	tb.Cleanup(hook.SetWaiting(func(partition string) {
		if partition == p {
			h.sleeps.Add(1)
		}
	}))
	idle, err := c.Task(p, "idle", []string{"y"}) // no row has y
	if err != nil {
		tb.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	tb.Cleanup(func() { cancel(); wg.Wait() })
	for range n {
		wg.Go(func() {
			if _, err := idle.Wait(wctx, 1); err == nil {
				tb.Error("a Wait of a task with nothing ready returned rows")
			}
		})
	}
	for deadline := time.Now().Add(30 * time.Second); h.sleeps.Load() < int64(n); {
		if time.Now().After(deadline) {
			tb.Fatalf("%d of %d Waits asleep after 30s", h.sleeps.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
	return h
}

// Appends that change nothing a Wait looks at (the partition's change
// count, its consumed count, a fulfilment of the Wait's registered claim)
// leave the Waits asleep: 32 blocked Waits and 40 lease extensions by
// another task wake none of them (each would go back to sleep, a wake-up
// per Wait per append).
func TestWaitsSleepThroughUnrelatedAppends(t *testing.T) {
	const waiters, extends = 32, 40
	h := blockedWaits(t, "herd", waiters)
	time.Sleep(50 * time.Millisecond) // any Wait still settling goes to sleep
	before := h.sleeps.Load()
	for range extends {
		if err := h.lease.Extend(context.Background(), time.Minute); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond) // time for woken Waits to sleep again
	}
	time.Sleep(50 * time.Millisecond)
	if woken := h.sleeps.Load() - before; woken >= waiters {
		t.Errorf("%d extensions woke the %d Waits %d times, want fewer than %d", extends, waiters, woken, waiters)
	}
}

// BenchmarkAppendWithWaiters is the cost of an append (a lease's
// extension) by one task while W Waits of another task, with nothing
// ready, are blocked on the same partition: what blocked consumers cost
// every other call.
//
//	go test -run '^$' -bench AppendWithWaiters ./internal/replica
func BenchmarkAppendWithWaiters(b *testing.B) {
	for _, waiters := range []int{0, 100, 1000} {
		b.Run("waiters="+strconv.Itoa(waiters), func(b *testing.B) {
			h := blockedWaits(b, "herd-bench", waiters)
			before := h.sleeps.Load()
			b.ResetTimer()
			for b.Loop() {
				if err := h.lease.Extend(context.Background(), time.Minute); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(h.sleeps.Load()-before)/float64(b.N), "wakes/op")
		})
	}
}
