package redis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/tq"
)

// TestWaitDeadlineInOutage: Waits whose deadlines pass while
// redis-server is away return their contexts' error at their deadlines:
// what they leave to cancel (their registered claims) goes on in the
// background, and a cut-off request is not reported as of unknown
// outcome. (The cancel used to run in the caller, on a timeout of its
// own: a Wait returned seconds after its deadline.)
func TestWaitDeadlineInOutage(t *testing.T) {
	srv := redistest.Start(t)
	c, err := tq.Open(t.Context(), srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const waits = 8
	type result struct {
		late time.Duration
		err  error
	}
	results := make(chan result, waits)
	deadline := time.Now().Add(1500 * time.Millisecond)
	for i := range waits {
		task, err := c.Task("outage", "w", []string{"a"}, tq.LeaseFor(2500*time.Millisecond), tq.ConsumerName("w"+string(rune('0'+i))))
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			ctx, cancel := context.WithDeadline(context.Background(), deadline)
			defer cancel()
			_, err := task.Wait(ctx, 1)
			results <- result{time.Since(deadline), err}
		}()
	}
	time.Sleep(500 * time.Millisecond) // the Waits registered their claims
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := srv.Restart(context.Background()); err != nil {
			t.Errorf("restarting redis-server: %v", err)
		}
	}()
	var worst time.Duration
	for range waits {
		r := <-results
		if !errors.Is(r.err, context.DeadlineExceeded) || errors.Is(r.err, tq.ErrOutcomeUnknown) {
			t.Errorf("a Wait past its deadline in the outage: %v, want context.DeadlineExceeded", r.err)
		}
		worst = max(worst, r.late)
	}
	t.Logf("%d Waits returned at most %v after their deadline", waits, worst.Round(time.Millisecond))
	// Far below the former cancel's own timeout (5 s), with room for a
	// loaded machine.
	if worst > 2*time.Second {
		t.Errorf("a Wait returned %v after its deadline", worst)
	}
}
