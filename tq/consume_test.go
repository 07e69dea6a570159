package tq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tqgo/tqgo/tq"
)

// waitStatus polls the task's status until ok accepts it, or fails the
// test after 10 s.
func waitStatus(t *testing.T, tk *tq.Task, ok func(tq.TaskStatus) bool) tq.TaskStatus {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := tk.Status(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("status never came: last %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Consume maps a handler's result to the lease's fate: nil acknowledges,
// an error nacks (the rows come back, delivered again after the backoff),
// Permanent drops, a panic is an error.
func TestConsumeMapsResults(t *testing.T) {
	c := openMemory(t)
	keys := []string{"ok-0", "ok-1", "fail-0", "bad-0", "panic-0"}
	putA(t, c, "p", keys)
	tk := task(t, c, "p", "work")
	var mu sync.Mutex
	seen := map[string][]int{} // key -> deliveries of each call
	h := func(ctx context.Context, l *tq.Lease) error {
		k := l.Keys()[0]
		mu.Lock()
		seen[k] = append(seen[k], l.Deliveries[0])
		mu.Unlock()
		switch {
		case strings.HasPrefix(k, "fail") && l.Deliveries[0] == 1:
			return errors.New("transient")
		case strings.HasPrefix(k, "bad"):
			return tq.Permanent(errors.New("does not parse"))
		case strings.HasPrefix(k, "panic") && l.Deliveries[0] == 1:
			panic("handler bug")
		}
		return nil
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- tk.Consume(ctx, 1, h, tq.Backoff(50*time.Millisecond, 100*time.Millisecond)) }()
	st := waitStatus(t, tk, func(s tq.TaskStatus) bool { return s.Acked == 4 && s.Dropped == 1 })
	took := time.Since(start)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Consume after its context ended: %v, want nil", err)
	}
	if st.Leased != 0 || st.Ready != 0 || st.Dead != 0 {
		t.Errorf("status: %+v, want 4 acked and 1 dropped", st)
	}
	mu.Lock()
	defer mu.Unlock()
	for k, want := range map[string][]int{"ok-0": {1}, "fail-0": {1, 2}, "bad-0": {1}, "panic-0": {1, 2}} {
		if fmt.Sprint(seen[k]) != fmt.Sprint(want) {
			t.Errorf("%s handled with deliveries %v, want %v", k, seen[k], want)
		}
	}
	if took < 50*time.Millisecond {
		t.Errorf("the failed rows came back after %v, before the 50 ms backoff", took)
	}
}

// A handler slower than the lease keeps its rows: Consume extends the
// lease while it runs, and another consumer claims nothing meanwhile.
func TestConsumeExtendsTheLease(t *testing.T) {
	c := openMemory(t)
	putA(t, c, "p", []string{"slow"})
	const lease = 150 * time.Millisecond
	tk := task(t, c, "p", "work", tq.LeaseFor(lease))
	other := task(t, c, "p", "work", tq.LeaseFor(lease), tq.ConsumerName("other"))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	started, release := make(chan struct{}), make(chan struct{})
	var calls int
	done := make(chan error, 1)
	go func() {
		done <- tk.Consume(ctx, 1, func(ctx context.Context, l *tq.Lease) error {
			calls++
			close(started)
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		})
	}()
	<-started
	for end := time.Now().Add(5 * lease); time.Now().Before(end); time.Sleep(lease / 10) {
		l, err := other.Claim(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if l.Len() != 0 {
			t.Fatalf("another consumer claimed %q while the handler ran, %v into a %v lease", l.Keys(), time.Since(end.Add(-5*lease)), lease)
		}
	}
	st, err := tk.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Leases) != 1 || st.Leases[0].Holder == "other" || st.Leases[0].Rows != 1 {
		t.Errorf("leases while the handler runs: %+v, want one of the consumer's", st.Leases)
	}
	close(release)
	waitStatus(t, tk, func(s tq.TaskStatus) bool { return s.Acked == 1 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if calls != 1 {
		t.Errorf("handler called %d times, want 1", calls)
	}
}

// A lease taken away while its handler runs (a reset here; an expiry
// during a partition from the server, in life) cancels the handler's
// context with ErrLeaseLost, and Consume goes on.
func TestConsumeLeaseLost(t *testing.T) {
	c := openMemory(t)
	putA(t, c, "p", []string{"r"})
	tk := task(t, c, "p", "work", tq.LeaseFor(90*time.Millisecond))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	causes := make(chan error, 2)
	done := make(chan error, 1)
	calls := 0
	go func() {
		done <- tk.Consume(ctx, 1, func(hctx context.Context, l *tq.Lease) error {
			if calls++; calls > 1 {
				return nil
			}
			if err := c.ResetConsumption(ctx, "p", "work"); err != nil {
				return err
			}
			<-hctx.Done()
			causes <- context.Cause(hctx)
			return context.Cause(hctx)
		})
	}()
	select {
	case cause := <-causes:
		if !errors.Is(cause, tq.ErrLeaseLost) {
			t.Errorf("the handler's context ended with %v, want ErrLeaseLost", cause)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's context did not end when its lease was lost")
	}
	waitStatus(t, tk, func(s tq.TaskStatus) bool { return s.Acked == 1 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Consume stops on an error retrying cannot cure, and says which.
func TestConsumeStopsOnClose(t *testing.T) {
	c, err := tq.Open(t.Context(), "memory://")
	if err != nil {
		t.Fatal(err)
	}
	tk := task(t, c, "p", "work")
	done := make(chan error, 1)
	go func() {
		done <- tk.Consume(t.Context(), 4, func(context.Context, *tq.Lease) error { return nil }, tq.Workers(3))
	}()
	time.Sleep(20 * time.Millisecond)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, tq.ErrClosed) {
			t.Errorf("Consume on a closed client: %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Consume did not return when its client closed")
	}
	for _, bad := range []struct {
		n int
		h tq.Handler
		o tq.ConsumeOption
	}{{0, func(context.Context, *tq.Lease) error { return nil }, nil}, {1, nil, nil},
		{1, func(context.Context, *tq.Lease) error { return nil }, tq.Workers(0)},
		{1, func(context.Context, *tq.Lease) error { return nil }, tq.Backoff(time.Second, time.Millisecond)}} {
		var opts []tq.ConsumeOption
		if bad.o != nil {
			opts = append(opts, bad.o)
		}
		if err := tk.Consume(t.Context(), bad.n, bad.h, opts...); !errors.Is(err, tq.ErrInvalid) {
			t.Errorf("Consume(%d, handler %v, %d options): %v, want ErrInvalid", bad.n, bad.h != nil, len(opts), err)
		}
	}
}
