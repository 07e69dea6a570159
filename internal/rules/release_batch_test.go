package rules

import (
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
)

// A batch opened by a rank of a process that died: Release nacks its rows
// and ends the batch, so the new process's ranks both take shares of one
// new batch (left open, rank 1 would take the dead batch r0 while rank 0
// leased its rows afresh: out of step for good).
func TestReleaseEndsOpenBatches(t *testing.T) {
	p := New()
	n := uint64(0)
	apply := func(at int64, rec []byte) Result {
		n++
		r := p.Apply(&backends.Entry{N: n, ID: n, Time: at, Data: rec})
		if r.Err != nil {
			t.Fatalf("record %d: %v", n, r.Err)
		}
		return r
	}
	res, err := p.Prepare(1000, []string{"a", "b"}, []string{"x"}, nil, 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]metadata.FieldInfo{"x": {}}
	if _, err := p.Commit(1000, []metadata.RowUpdate{{Key: "a", Index: res[0].Index, Fields: fields},
		{Key: "b", Index: res[1].Index, Fields: fields}}); err != nil {
		t.Fatal(err)
	}
	claim := func(at int64, rank int, token string) Claimed {
		a := &ClaimArgs{Task: "t", Token: token, Lease: time.Hour, Rows: 2, Min: 1,
			Batch: &metadata.Batch{Ranks: 2, Rank: rank}, Select: Select{Fields: []string{"x"}}}
		return apply(at, ClaimRecord(a)).Claimed
	}
	if c := claim(2000, 0, "r0"); c.Lease != "r0" {
		t.Fatalf("rank 0 opened %+v", c)
	}
	// The process dies; reopened, its claims are released.
	for _, r := range p.Release() {
		apply(3000, r)
	}
	c0 := claim(4000, 0, "n0")
	c1 := claim(5000, 1, "n1")
	t.Logf("new rank 0: lease %q rows %d; new rank 1: lease %q rows %d", c0.Lease, len(c0.Rows), c1.Lease, len(c1.Rows))
	if c1.Lease != c0.Lease {
		t.Fatalf("ranks out of step after Release: rank 0 holds %q, rank 1 was given the released batch %q", c0.Lease, c1.Lease)
	}
}
