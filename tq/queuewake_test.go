package tq_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tqgo/tqgo/tq"
)

// A Wait that starts as the rows it waits for are committed returns them:
// a commit landing between its claim's read of the rows and its lease
// must wake it, not be taken for a change it has seen.
func TestWaitWakesOnARacingCommit(t *testing.T) {
	ctx := context.Background()
	c, err := tq.Open(ctx, "memory://")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for iter := range 300 {
		part := fmt.Sprintf("p%d", iter)
		task, err := c.Task(part, "t", []string{"x"})
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		got := make(chan error, 1)
		go func() {
			_, err := task.Wait(wctx, 1)
			got <- err
		}()
		if err := c.BatchPut(ctx, part, []string{"k"}, tq.Batch{"x": tq.Stacked([]int64{1})}, nil); err != nil {
			t.Fatal(err)
		}
		err = <-got
		cancel()
		if err != nil {
			t.Fatalf("iteration %d: Wait: %v", iter, err)
		}
	}
}
