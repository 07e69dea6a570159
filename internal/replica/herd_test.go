package replica_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends/backendtest/toylog"
	"github.com/tqgo/tqgo/internal/hook"
)

// Appends that change nothing a Wait looks at (the partition's change
// count, its consumed count, a fulfilment of the Wait's registered claim)
// leave the Waits asleep: 32 blocked Waits and 40 lease extensions by
// another task wake none of them (each would go back to sleep, a wake-up
// per Wait per append).
func TestWaitsSleepThroughUnrelatedAppends(t *testing.T) {
	ctx := context.Background()
	srv := toylog.NewServer(nil)
	c := client(t, srv, nil)
	const p = "herd"
	put(t, c, p, "k")
	busy, err := c.Task(p, "busy", []string{"x"})
	if err != nil {
		t.Fatal(err)
	}
	l, err := busy.Claim(ctx, 1)
	if err != nil || l.Len() != 1 {
		t.Fatalf("claim: %v, %d rows", err, l.Len())
	}
	var sleeps atomic.Int64
	restore := hook.SetWaiting(func(partition string) {
		if partition == p {
			sleeps.Add(1)
		}
	})
	defer restore()
	idle, err := c.Task(p, "idle", []string{"y"}) // no row has y: nothing is ever ready
	if err != nil {
		t.Fatal(err)
	}
	const waiters = 32
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range waiters {
		wg.Go(func() {
			if _, err := idle.Wait(wctx, 1); err == nil {
				t.Error("a Wait of a task with nothing ready returned rows")
			}
		})
	}
	for deadline := time.Now().Add(10 * time.Second); sleeps.Load() < waiters; {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d Waits asleep after 10s", sleeps.Load(), waiters)
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // any Wait still settling goes to sleep
	before := sleeps.Load()
	const extends = 40
	for range extends {
		if err := l.Extend(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond) // time for woken Waits to sleep again
	}
	time.Sleep(50 * time.Millisecond)
	woken := sleeps.Load() - before
	cancel()
	wg.Wait()
	if woken >= waiters {
		t.Errorf("%d extensions woke the %d Waits %d times, want fewer than %d", extends, waiters, woken, waiters)
	}
}
