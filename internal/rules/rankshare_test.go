package rules

import (
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends/metadata"
)

// rankClaim applies a claim of 2 rows by rank r of ranks, token token.
func rankClaim(t *testing.T, l *logged, now int64, ranks, r int, token string) Claimed {
	t.Helper()
	res, _ := l.at(t, now, ClaimRecord(&ClaimArgs{Task: "t", Token: token, Lease: time.Minute, Rows: 2, Min: 2,
		Batch: &metadata.Batch{Ranks: ranks, Rank: r}, Select: Select{Fields: []string{"f"}}}))
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	return res.Claimed
}

// A rank's claim finds the share its token took (Share), by the claim
// that opened the batch or one that took a share of it, till the batch
// ends; once every rank took its share and none of its rows is held, the
// batch no longer keeps the partition from being empty.
func TestShareByToken(t *testing.T) {
	l := &logged{p: New()}
	l.put(t, 1, "k1", "k2")
	opened := rankClaim(t, l, 2, 2, 0, "r0")
	took := rankClaim(t, l, 3, 2, 1, "r1")
	if opened.Lease != "r0" || took.Lease != "r0" {
		t.Fatalf("rank 0 %+v, rank 1 %+v: want batch r0 each", opened, took)
	}
	for _, tok := range []string{"r0", "r1"} {
		c, ok := l.p.Share("t", tok)
		if !ok || c.Lease != "r0" || len(c.Rows) != 2 || c.Deliveries[0].Deliveries != 1 {
			t.Errorf("Share of %q: %+v, %v; want batch r0, delivered once", tok, c, ok)
		}
	}
	if _, ok := l.p.Share("t", "other"); ok {
		t.Error("Share of a token no claim used found a batch")
	}
	if r, _ := l.at(t, 4, SettleRecord(&SettleArgs{Task: "t", Op: metadata.Ack, Lease: "r0", Indexes: []uint64{opened.Rows[0].Index, opened.Rows[1].Index}})); r.Err != nil {
		t.Fatal(r.Err)
	}
	if r, _ := l.at(t, 5, DeleteRecord([]string{"k1", "k2"})); r.Err != nil {
		t.Fatal(r.Err)
	}
	l.p.garbage, l.p.orphans = nil, nil // swept
	if !l.p.Empty() {
		t.Error("a partition whose one batch every rank took, acked and deleted, is not empty")
	}
}

// A rank claim of a job restarted with another number of ranks, within
// the lease of a batch the former ranks took, takes no share of that
// batch (its ranks are not the batch's): it leases afresh, and applying
// it does not fail. (A rank past the former count once indexed past the
// batch's ranks: every process reading the record failed.)
func TestShareOfOtherRanks(t *testing.T) {
	l := &logged{p: New()}
	l.put(t, 1, "k1", "k2")
	rankClaim(t, l, 2, 2, 0, "a0")
	rankClaim(t, l, 3, 2, 1, "a1")
	l.put(t, 4, "k3", "k4")
	c := rankClaim(t, l, 5, 4, 3, "b3")
	if c.Lease != "b3" || len(c.Rows) != 2 || c.Rows[0].Key != "k3" {
		t.Fatalf("rank 3 of 4 after a batch of 2 ranks: %+v, want a batch of its own of k3, k4", c)
	}
}

// A partition that holds nothing but an undone claim token (or a void)
// is empty once it expires, and says from when: its log may be emptied
// then, though no record comes to move its clock.
func TestEmptyFrom(t *testing.T) {
	l := &logged{p: New()}
	l.put(t, 1, "k1")
	if r, _ := l.at(t, 2, SettleRecord(&SettleArgs{Task: "t", Op: metadata.Undo, Lease: "c|8000000000000000"})); r.Err != nil {
		t.Fatal(r.Err)
	}
	if _, ok := l.p.EmptyFrom(); ok {
		t.Fatal("a partition holding a row says it will be empty")
	}
	if r, _ := l.at(t, 3, DeleteRecord([]string{"k1"})); r.Err != nil {
		t.Fatal(r.Err)
	}
	l.p.garbage, l.p.orphans = nil, nil // swept
	from, ok := l.p.EmptyFrom()
	if !ok || from != 2+voidFor.Microseconds()+1 {
		t.Fatalf("EmptyFrom: %d, %v; want true from the undo's time plus %v", from, ok, voidFor)
	}
	if l.p.Empty() || l.p.EmptyAt(from-1) || !l.p.EmptyAt(from) {
		t.Fatalf("Empty %v, EmptyAt(from-1) %v, EmptyAt(from) %v; want empty from %d only", l.p.Empty(), l.p.EmptyAt(from-1), l.p.EmptyAt(from), from)
	}
}
