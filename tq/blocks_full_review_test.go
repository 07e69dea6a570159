package tq_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tqgo/tqgo/tq"
)

// A put by a block into a partition whose Capacity bounds rows: with
// Fail it fails with ErrFull and leaves no cell; with Block it waits for
// room and then commits by its PutNew.
func TestReviewBlocksFullPolicy(t *testing.T) {
	ctx := context.Background()
	c, st, meta := blockClient(t)
	const n = 2
	put := func(ctx context.Context, from int) error {
		return putRows(ctx, c, from, n)
	}
	if err := c.SetCapacity(ctx, "p", tq.Capacity{Rows: 2 * n}); err != nil {
		t.Fatal(err)
	}
	if err := put(ctx, 0); err != nil {
		t.Fatal(err)
	}
	waitCalls(t, meta, "Block", 1)
	if err := put(ctx, n); err != nil {
		t.Fatal(err)
	}
	cells := st.Len()
	err := put(tq.WhenFull(ctx, tq.Fail), 2*n)
	if !errors.Is(err, tq.ErrFull) {
		t.Fatalf("a put by a block into a full partition, Fail: %v, want ErrFull", err)
	}
	if st.Len() != cells {
		t.Fatalf("%d cells after the refused put, want %d", st.Len(), cells)
	}
	before := meta.snapshot()
	done := make(chan error, 1)
	go func() { done <- put(ctx, 3*n) }()
	time.Sleep(50 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("a put into a full partition returned %v, want it to wait", err)
	default:
	}
	if err := c.Clear(ctx, "p", keysN("k", n)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the put waited on after room was made")
	}
	after := meta.snapshot()
	if after["Prepare"] != before["Prepare"] {
		t.Fatalf("the waiting put went by Prepare: %v -> %v", before, after)
	}
	rows, err := c.List(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if len(rows.Rows) != 2*n {
		t.Fatalf("%d rows, want %d", len(rows.Rows), 2*n)
	}
}
