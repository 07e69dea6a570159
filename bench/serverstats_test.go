package main

import (
	"math"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/internal/redistest"
)

// TestServerMeterCountsSentCommands: a window counts the commands a client
// sent, a script's and a transaction's commands inside the EVAL or EXEC
// that ran them and not again, and the calibration's windows are left out
// of the repetitions.
func TestServerMeterCountsSentCommands(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	opts := &redis.Options{Addr: srv.Addr()}
	rc := redis.NewClient(opts)
	defer rc.Close()
	sm := newServerMeter(rc, opts, true)
	work := func() {
		t.Helper()
		if err := rc.Eval(ctx, "for i = 1, 10 do redis.call('SET', KEYS[1], i) end return 1", []string{"k"}).Err(); err != nil {
			t.Fatal(err)
		}
		pipe := rc.TxPipeline()
		pipe.Incr(ctx, "n")
		pipe.Incr(ctx, "n")
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if err := rc.Set(ctx, "k", "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	const reps, iters, ops = 2, 2, 4
	for range 1 + reps*iters { // the first window is the probe's
		sp, err := sm.begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		work()
		if err := sp.end(ctx, ops); err != nil {
			t.Fatal(err)
		}
	}
	if sm.probeErr != nil {
		t.Fatal(sm.probeErr)
	}
	rs := sm.reps(reps, iters)
	if len(rs) != reps {
		t.Fatalf("%d repetitions, want %d", len(rs), reps)
	}
	want := map[string]float64{"eval": 0.25, "set": 0.25, "multi": 0.25, "exec": 0.25}
	for _, r := range rs {
		for k, c := range want {
			if got := r.per[k].calls; math.Abs(got-c) > 1e-9 {
				t.Errorf("%s: %v calls per op, want %v (per %v)", k, got, c, r.per)
			}
		}
		if _, ok := r.per["incr"]; ok {
			t.Errorf("a transaction's INCR counted as sent: %v", r.per)
		}
		var sum float64
		for _, p := range r.per {
			sum += p.calls * p.usec
		}
		if r.cmd <= 0 || math.Abs(sum/1e6-r.cmd) > 1e-9 || r.cpu <= 0 {
			t.Errorf("command time %v s per op (commands sum to %v s), CPU %v s", r.cmd, sum/1e6, r.cpu)
		}
	}
}
