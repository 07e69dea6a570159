package tqserve_test

import (
	"fmt"
	"testing"

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
