package tqserve_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/tq"
	"github.com/tqgo/tqgo/tqserve"
)

// A custom claim through a server whose copy of the partition is behind
// the log (rows another process wrote: another server that owned it, a
// client of the engine itself) picks among the rows ready now: the pick
// is the client's, made once, so candidates from a stale copy would make
// it pick none of the rows written since, and Claim return nothing while
// they are ready.
func TestCandidatesCaughtUp(t *testing.T) {
	redistest.Available(t)
	rs := redistest.Start(t)
	engine := rs.URL() + "?prefix=cand"
	direct := openClient(t, engine)
	for i := range 4 {
		if err := direct.Put(t.Context(), "p", fmt.Sprintf("k%d", i), map[string]any{"x": int64(i)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	s := serveOn(t, engine, tqserve.WithLogger(discardLogger()))
	c := openClient(t, "tq://"+s.addr)
	all := tq.SamplerFunc(func(ready []tq.Candidate, n int) ([][]int, []int) {
		var units [][]int
		for i := range min(n, len(ready)) {
			units = append(units, []int{i})
		}
		return units, nil
	})
	task, err := c.Task("p", "work", []string{"x"}, tq.WithSampler(all))
	if err != nil {
		t.Fatal(err)
	}
	l, err := task.Claim(t.Context(), 4)
	if err != nil {
		t.Fatal(err)
	}
	if l == nil || l.Len() != 4 {
		t.Fatalf("claim of 4 ready rows through a server whose copy was behind: %v, want 4 rows", l)
	}
}

// A custom claim through a server whose sampler picks nothing changes
// nothing, so it appends nothing to the partition's log (but the task's
// first claim, whose record makes the task): a consumer whose sampler
// declines the ready rows (waiting for a better batch) costs the log no
// record per look.
func TestEmptyCustomClaimAppendsNothing(t *testing.T) {
	redistest.Available(t)
	rs := redistest.Start(t)
	engine := rs.URL() + "?prefix=empty"
	s := serveOn(t, engine, tqserve.WithLogger(discardLogger()))
	c := openClient(t, "tq://"+s.addr)
	ctx := t.Context()
	for i := range 4 {
		if err := c.Put(ctx, "p", fmt.Sprintf("k%d", i), map[string]any{"x": int64(i)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	none := tq.SamplerFunc(func([]tq.Candidate, int) ([][]int, []int) { return nil, nil })
	task, err := c.Task("p", "work", []string{"x"}, tq.WithSampler(none))
	if err != nil {
		t.Fatal(err)
	}
	eng, err := backends.Open(ctx, engine)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close() })
	last := func() uint64 {
		t.Helper()
		tl, err := eng.Log.Read(ctx, "p", backends.Pos{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		return tl.End(backends.Pos{}).N
	}
	claim := func() {
		t.Helper()
		l, err := task.Claim(ctx, 4)
		if err != nil {
			t.Fatal(err)
		}
		if l != nil && l.Len() > 0 {
			t.Fatalf("a sampler that picks nothing leased %d rows", l.Len())
		}
	}
	before := last()
	claim()
	if n := last() - before; n > 1 {
		t.Fatalf("the task's first claim, empty, appended %d records, want at most 1", n)
	}
	before = last()
	const claims = 5
	for range claims {
		claim()
	}
	if n := last() - before; n != 0 {
		t.Fatalf("%d empty custom claims appended %d records (%.1f each), want none", claims, n, float64(n)/claims)
	}
	// Nor when many consumers claim at once, each claim's copy moved by
	// the others' calls.
	const consumers = 8
	tasks := make([]*tq.Task, consumers)
	for i := range tasks {
		if tasks[i], err = openClient(t, "tq://"+s.addr).Task("p", "work", []string{"x"}, tq.WithSampler(none)); err != nil {
			t.Fatal(err)
		}
	}
	before = last()
	var wg sync.WaitGroup
	errs := make(chan error, consumers*claims)
	for _, task := range tasks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range claims {
				if l, err := task.Claim(ctx, 4); err != nil || l != nil && l.Len() > 0 {
					errs <- fmt.Errorf("claim: %v, %v", l, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := last() - before; n != 0 {
		t.Fatalf("%d concurrent empty custom claims appended %d records (%.1f each), want none", consumers*claims, n, float64(n)/(consumers*claims))
	}
}
