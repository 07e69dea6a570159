package tq_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tqgo/tqgo/tq"
)

// Two ranks waiting on one task while its rows become ready a group at a
// time: whichever rank's claim selects the batch, the other takes its
// share of it at once (its Wait must not sleep through the batch's
// opening), and the shares are disjoint and cover the batch.
func TestRanksWaitShareOneBatch(t *testing.T) {
	ctx := context.Background()
	c, err := tq.Open(ctx, "memory://")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	xs := make([]int64, len(keys))
	for iter := range 30 {
		part := fmt.Sprintf("p%d", iter)
		var wg sync.WaitGroup
		shares := make([][]string, 2)
		errs := make([]error, 2)
		// Far shorter than the lease (a minute): a rank that slept
		// through the batch would only wake when its lease ended.
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		for r := range 2 {
			task, err := c.Task(part, "train", []string{"x"}, tq.Ranks(2, r, "len"), tq.WithGroups(tq.GroupTag("g"), 2))
			if err != nil {
				t.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				l, err := task.Wait(wctx, len(keys), tq.WithData("x", "y"))
				if err == nil {
					shares[r] = l.Keys()
				}
				errs[r] = err
			}()
		}
		tags := make([]tq.Tag, len(keys))
		for i := range tags {
			tags[i] = tq.Tag{"g": int64(i / 2), "len": int64(3)}
		}
		if err := c.BatchPut(ctx, part, keys, tq.Batch{"y": tq.Stacked(xs)}, tags); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < len(keys); i += 2 { // a group at a time
			if err := c.BatchPut(ctx, part, keys[i:i+2], tq.Batch{"x": tq.Stacked(xs[:2])}, nil); err != nil {
				t.Fatal(err)
			}
		}
		wg.Wait()
		cancel()
		if errs[0] != nil || errs[1] != nil {
			t.Fatalf("iteration %d: ranks' waits: %v, %v", iter, errs[0], errs[1])
		}
		seen := map[string]bool{}
		for _, s := range shares {
			for _, k := range s {
				if seen[k] {
					t.Fatalf("iteration %d: %q in both shares %v %v", iter, k, shares[0], shares[1])
				}
				seen[k] = true
			}
		}
		if len(seen) != len(keys) {
			t.Fatalf("iteration %d: shares %v %v do not cover the batch", iter, shares[0], shares[1])
		}
	}
}
