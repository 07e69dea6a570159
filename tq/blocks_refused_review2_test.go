package tq_test

import (
	"context"
	"testing"

	"github.com/tqgo/tqgo/tq"
)

// A set of fields backed off blocks (a PutNew of it found a key had a
// row) whose later puts are of new keys goes by Prepare, at indexes above
// the partition's block: the next put of another set cannot use that
// block (this client's order), and a client putting new keys of both in
// turn must not fetch (and wait for) a Block and release one at each put
// of the other set: its puts cost no more calls than puts by Prepare.
func TestReview2RefusedSetNoBlockChurn(t *testing.T) {
	ctx := context.Background()
	c, _, meta := blockClient(t)
	const n = 2
	both := func(from int) tq.Batch { return blockBatch(from, n) } // x and v
	xOnly := func() tq.Batch { return tq.Batch{"x": tq.Stacked(make([]float32, n), n, 1)} }
	if err := c.BatchPut(ctx, "p", keysN("k", n), both(0), nil); err != nil {
		t.Fatal(err)
	}
	waitCalls(t, meta, "Block", 1)
	// x alone, of keys that have rows: its PutNew is refused, x alone
	// backs off blocks.
	if err := c.BatchPut(ctx, "p", keysN("k", n), xOnly(), nil); err != nil {
		t.Fatal(err)
	}
	before := meta.snapshot()
	const puts = 40
	for i := range puts {
		from := (i + 1) * n
		keys := keysN("k", from+n)[from:]
		b := both(from)
		if i%2 == 1 {
			b = xOnly()
		}
		if err := c.BatchPut(ctx, "p", keys, b, nil); err != nil {
			t.Fatal(err)
		}
	}
	after := meta.snapshot()
	calls := 0
	for op, k := range after {
		calls += k - before[op]
	}
	blocks := after["Block"] - before["Block"]
	t.Logf("%d puts in turn: %v -> %v", puts, before, after)
	if blocks > puts/4+1 || calls > 2*puts+2 { // +2: a Block and the release of the block it held at most
		t.Fatalf("%d puts of new keys in turn, x alone backed off: %d Blocks, %d calls; want a Block per few puts at most, and no more calls than by Prepare (%d) but for one block", puts, blocks, calls, 2*puts)
	}
}
