package redis_test

import (
	"testing"

	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/tq"
)

// A client whose copy of the rows is stale (another client replaced them)
// falls back to the looked-up read into the same batch: the result is the
// new rows, whole.
func TestIntoStaleCache(t *testing.T) {
	srv := redistest.Start(t)
	a := openTQ(t, srv.URL()+"?prefix=rv")
	b := openTQ(t, srv.URL()+"?prefix=rv")
	ctx := t.Context()
	keys := keyRange("k", 48)
	all := make([]int, len(keys))
	for i := range all {
		all[i] = i
	}
	var prev tq.Batch
	for step := range 8 {
		w := a
		if step%2 == 1 {
			w = b
		}
		if err := w.BatchPut(ctx, "p", keys, rollout(keys, step), nil); err != nil {
			t.Fatal(err)
		}
		got, err := a.BatchGetInto(ctx, "p", keys, prev)
		if err != nil {
			t.Fatal(err)
		}
		checkRollout(t, got, keys, step, all)
		prev = got
	}
}
