package rules

import (
	"testing"
	"time"
)

// A release naming many indexes (a client's bug, or a hostile one: a tq
// server validates no bound on ReleaseBlockRequest.written) is applied
// by every reader of the log: it must cost about its size, not the
// block's size times it.
func TestReviewReleaseManyWritten(t *testing.T) {
	p := New()
	if err := p.Block(1, []string{"a"}, 0, 7, MaxBlock); err != nil {
		t.Fatal(err)
	}
	written := make([]uint64, 1<<21)
	for i := range written {
		written[i] = uint64(MaxBlock + i) // none of the block's
	}
	start := time.Now()
	p.ReleaseBlock(2, 0, 7, written)
	if d := time.Since(start); d > time.Second {
		t.Fatalf("a release naming %d indexes took %v", len(written), d)
	}
}
