package tq_test

import (
	"context"
	"testing"
	"time"

	"github.com/tqgo/tqgo/tq"
)

// idleBlockAborted puts twice (the second by a block), lets the block
// idle past a Reclaim's age (another client's, or the tq server's
// periodic one), which aborts it and sweeps its garbage, then puts
// again and closes. It returns the cells left once everything is
// reclaimed, and the error of the third put.
func idleBlockAborted(t *testing.T) (cells int, err error) {
	ctx := context.Background()
	c, st, meta := blockClient(t)
	const n = 2
	put := func(from int) error {
		return putRows(ctx, c, from, n)
	}
	if err := put(0); err != nil {
		t.Fatal(err)
	}
	waitCalls(t, meta, "Block", 1)
	if err := put(n); err != nil { // by the block
		t.Fatal(err)
	}
	if got := meta.snapshot()["PutNew"]; got != 1 {
		t.Fatalf("the second put made %d PutNew, want 1", got)
	}
	time.Sleep(30 * time.Millisecond)
	other := newClient(t, unstaged{st}, meta)
	if _, err := other.Reclaim(ctx, "p", 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	err = put(2 * n)
	if cerr := c.Close(); cerr != nil {
		t.Fatal(cerr)
	}
	if _, rerr := other.Reclaim(ctx, "p", 0); rerr != nil {
		t.Fatal(rerr)
	}
	return st.Len(), err
}

// A producer's block aborted as idle, its garbage swept: its next put of
// new keys still succeeds (by Prepare), rather than fail as if the store
// had lost the block in a failover.
func TestReviewIdleBlockAbortedPutSucceeds(t *testing.T) {
	if _, err := idleBlockAborted(t); err != nil {
		t.Fatalf("a put after its idle block was aborted and swept: %v", err)
	}
}

// A client retires a block idle for blockIdle, so that a block the store
// aborted as idle is not used: nothing leaks.
func TestReviewIdleBlockRetired(t *testing.T) {
	defer tq.SetBlockIdle(20 * time.Millisecond)()
	cells, err := idleBlockAborted(t)
	if err != nil {
		t.Fatal(err)
	}
	if want := 2 * 3 * 2; cells != want {
		t.Fatalf("%d cells stored for 3 puts of 2 keys, 2 fields: want %d (the rest leaked)", cells, want)
	}
}

// An update of rows another client put (keys that have rows, at indexes
// above this client's block) is not a put of new keys of this client:
// it does not retire the block, whose indexes keep this client's order.
func TestReviewUpdateKeepsBlock(t *testing.T) {
	ctx := context.Background()
	st, meta := blockEngine(t)
	a := newClient(t, unstaged{st}, meta, tq.WithIndexBlocks())
	b := newClient(t, unstaged{st}, meta)
	const n = 2
	put := func(c *tq.Client, prefix string, from int) {
		t.Helper()
		if err := c.BatchPut(ctx, "p", keysN(prefix, from+n)[from:], blockBatch(from, n), nil); err != nil {
			t.Fatal(err)
		}
	}
	put(a, "k", 0)
	waitCalls(t, meta, "Block", 1)
	put(a, "k", n) // by the block
	put(b, "j", 0) // another client's rows, above a's block
	// a scores b's rows: a field of its own, by Prepare and Commit.
	if err := a.BatchPut(ctx, "p", keysN("j", n), tq.Batch{"score": tq.Stacked(make([]float32, n), n, 1)}, nil); err != nil {
		t.Fatal(err)
	}
	before := meta.snapshot()
	put(a, "k", 2*n)
	after := meta.snapshot()
	if after["PutNew"] != before["PutNew"]+1 || after["Block"] != 1 || after["ReleaseBlock"] != 0 {
		t.Fatalf("a put of new keys after an update of others' rows: calls %v -> %v; want one PutNew by the block it held", before, after)
	}
}

// One client putting new keys of two sets of fields in turn into one
// partition: one block serves both sets (its fields are theirs), so
// there is a Block per few puts, not one per put (as when each set had
// blocks of its own, each put's index above the other set's block).
func TestReviewTwoSetsInTurn(t *testing.T) {
	ctx := context.Background()
	c, _, meta := blockClient(t)
	const n, puts = 2, 40
	for i := range puts {
		keys := keysN("k", (i+1)*n)[i*n:]
		f := "a"
		if i%2 == 1 {
			f = "b"
		}
		if err := c.BatchPut(ctx, "p", keys, tq.Batch{f: tq.Stacked(make([]float32, n), n, 1)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	got := meta.snapshot()
	// The first put of each set goes by Prepare (the second also retires
	// the block of the first set's fields alone); then a block of 8
	// indexes holds 4 puts.
	if got["Block"] > puts/4+1 || got["Prepare"] > 3 || got["PutNew"] < puts-3 {
		t.Fatalf("%d puts of two sets of fields in turn: %v; want a Block per few puts, not per put", puts, got)
	}
}
