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
)

// BenchmarkAppendWithWaiters is the cost of an append (a lease's
// extension) by one task while W Waits of another task, with nothing
// ready, are blocked on the same partition: what blocked consumers cost
// every other call.
//
//	go test -run '^$' -bench AppendWithWaiters ./internal/replica
func BenchmarkAppendWithWaiters(b *testing.B) {
	for _, waiters := range []int{0, 100, 1000} {
		b.Run("waiters="+strconv.Itoa(waiters), func(b *testing.B) {
			ctx := context.Background()
			srv := toylog.NewServer(nil)
			c := client(b, srv, nil)
			p := "herd-bench-" + strconv.Itoa(waiters)
			put(b, c, p, "k")
			busy, err := c.Task(p, "busy", []string{"x"})
			if err != nil {
				b.Fatal(err)
			}
			l, err := busy.Claim(ctx, 1)
			if err != nil || l.Len() != 1 {
				b.Fatalf("claim: %v", err)
			}
			var sleeps atomic.Int64
			restore := hook.SetWaiting(func(partition string) {
				if partition == p {
					sleeps.Add(1)
				}
			})
			defer restore()
			idle, err := c.Task(p, "idle", []string{"y"})
			if err != nil {
				b.Fatal(err)
			}
			wctx, cancel := context.WithCancel(ctx)
			var wg sync.WaitGroup
			defer func() { cancel(); wg.Wait() }()
			for range waiters {
				wg.Go(func() { _, _ = idle.Wait(wctx, 1) })
			}
			for deadline := time.Now().Add(30 * time.Second); sleeps.Load() < int64(waiters); {
				if time.Now().After(deadline) {
					b.Fatalf("%d of %d Waits asleep", sleeps.Load(), waiters)
				}
				time.Sleep(time.Millisecond)
			}
			before := sleeps.Load()
			b.ResetTimer()
			for b.Loop() {
				if err := l.Extend(ctx, time.Minute); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(sleeps.Load()-before)/float64(b.N), "wakes/op")
		})
	}
}
