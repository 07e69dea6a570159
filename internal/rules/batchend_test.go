package rules

import (
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
)

// A rank whose share of a batch is empty takes its turn of that batch
// even once the other ranks settled every row, until the batch's lease
// would have ended; a snapshot keeps that end.
func TestBatchEndOutlivesSettles(t *testing.T) {
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
	idx := []uint64{res[0].Index, res[1].Index}
	claim := func(at int64, rank int, token string) Claimed {
		a := &ClaimArgs{Task: "t", Token: token, Lease: time.Second, Rows: 2, Min: 1,
			Batch: &metadata.Batch{Ranks: 3, Rank: rank}, Select: Select{Fields: []string{"x"}}}
		return apply(at, ClaimRecord(a)).Claimed
	}
	first := claim(2000, 0, "r0")
	if first.Lease != "r0" || len(first.Rows) != 2 {
		t.Fatalf("rank 0 opened %+v", first)
	}
	if c := claim(3000, 1, "r1"); c.Lease != "r0" {
		t.Fatalf("rank 1 took %q, want the batch r0", c.Lease)
	}
	apply(4000, SettleRecord(&SettleArgs{Task: "t", Op: metadata.Ack, Lease: "r0", Indexes: idx}))
	snap, err := p.Snapshot()

	if err != nil {
		t.Fatal(err)
	}
	if p, err = Restore(snap); err != nil {
		t.Fatal(err)
	}
	// Before the end rank 1's claim gave the batch (3000 + 1 s).
	if c := claim(900_000, 2, "r2"); c.Lease != "r0" {
		t.Fatalf("rank 2 after the others settled: lease %q, want its turn of batch r0", c.Lease)
	}
	// The batch closed once every rank took it: rank 2's next claim
	// opens another (nothing ready: no lease).
	if c := claim(950_000, 2, "r2b"); c.Lease != "" {
		t.Fatalf("rank 2's second claim: %q", c.Lease)
	}
}
