package rules

import (
	"slices"
	"testing"
)

// On a Redis Cluster an append draws its indexes (INCRBY on the
// counter's slot) before its script appends it (backends/redis/log.go,
// reserve): two Blocks of one partition made at once may reach the log
// in the other order than their indexes. Both hold indexes their writers
// had reserved: both are live, PutNew finds each, and a snapshot of the
// partition restores.
func TestReviewBlocksOutOfOrder(t *testing.T) {
	p := New()
	fields := []string{"a"}
	if err := p.Block(1_000, fields, 108, 7, 8); err != nil {
		t.Fatal(err)
	}
	if err := p.Block(1_001, fields, 100, 7, 8); err != nil {
		t.Fatalf("a block whose indexes were drawn before a live block's, appended after it: %v", err)
	}
	if err := p.Block(1_002, fields, 104, 7, 8); err == nil {
		t.Fatal("a block overlapping live blocks was granted")
	}
	for _, base := range []uint64{100, 108} {
		if _, err := p.PutNew(2_000, base+1, 7, []string{"k" + string(rune('0'+base%10))}, fields, nil, putNewUpdates(base+1, []string{"k" + string(rune('0'+base%10))}, fields)); err != nil {
			t.Fatalf("PutNew at %d: %v", base+1, err)
		}
	}
	snap := mustSnap(t, p)
	q, err := Restore(snap)
	if err != nil {
		t.Fatalf("restoring the snapshot: %v", err)
	}
	if !slices.Equal(mustSnap(t, q), snap) {
		t.Fatal("the restored partition's snapshot differs")
	}
}
