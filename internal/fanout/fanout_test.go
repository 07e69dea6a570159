package fanout

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestRunBoundsDepthAndRunsEveryTask(t *testing.T) {
	var inFlight, peak, done atomic.Int32
	err := Run(context.Background(), 20, 3, func(ctx context.Context, i int) error {
		n := inFlight.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(2 * time.Millisecond)
		inFlight.Add(-1)
		done.Add(1)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if done.Load() != 20 {
		t.Fatalf("ran %d tasks, want 20", done.Load())
	}
	if p := peak.Load(); p > 3 || p < 2 {
		t.Fatalf("peak in flight %d, want 2..3 with depth 3", p)
	}
}

func TestRunStopsAtFirstErrorAndWaits(t *testing.T) {
	boom := errors.New("boom")
	var started, finished atomic.Int32
	err := Run(context.Background(), 100, 2, func(ctx context.Context, i int) error {
		started.Add(1)
		defer finished.Add(1)
		if i == 3 {
			return boom
		}
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Millisecond):
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Fatalf("got %v, want the first error", err)
	}
	if s := started.Load(); s >= 100 {
		t.Fatalf("all %d tasks started after an error", s)
	}
	if started.Load() != finished.Load() {
		t.Fatalf("Run returned with %d of %d tasks still running", started.Load()-finished.Load(), started.Load())
	}
}

func TestRunSerialInOrder(t *testing.T) {
	var order []int
	if err := Run(context.Background(), 5, 1, func(ctx context.Context, i int) error {
		order = append(order, i)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for i, v := range order {
		if v != i {
			t.Fatalf("order %v", order)
		}
	}
}
