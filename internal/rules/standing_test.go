package rules

import (
	"slices"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
)

// entryAt applies a record at time now (µs) and returns its result and
// the standing claims it fulfilled.
type logged struct {
	p *Partition
	n uint64
}

func (l *logged) at(t *testing.T, now int64, data []byte) (Result, []Claimed) {
	t.Helper()
	l.n++
	r := l.p.Apply(&backends.Entry{N: l.n, ID: l.n, Time: now, Base: 100 * l.n, Data: data})
	return r, l.p.TakeFulfilled()
}

func (l *logged) put(t *testing.T, now int64, keys ...string) {
	t.Helper()
	r, _ := l.at(t, now, PrepareRecord(keys, []string{"f"}, nil, len(keys)))
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	ups := make([]metadata.RowUpdate, len(keys))
	for i, k := range keys {
		ups[i] = metadata.RowUpdate{Key: k, Index: r.Reservations[i].Index, Fields: map[string]metadata.FieldInfo{"f": {}}}
	}
	rec, _ := CommitRecord(ups)
	if r, _ := l.at(t, now, rec); r.Err != nil {
		t.Fatal(r.Err)
	}
}

func keysOf(c Claimed) []string {
	var out []string
	for _, r := range c.Rows {
		out = append(out, r.Key)
	}
	return out
}

// A claim with a Hold that finds nothing stays, and the commit that makes
// rows ready fulfils it, oldest first; the claim replacing a fulfilled one
// leases nothing more; an Unwait of a fulfilled one returns its rows; a
// standing claim lapses after its Hold.
func TestStandingClaims(t *testing.T) {
	l := &logged{p: New()}
	sel := Select{Fields: []string{"f"}}
	claim := func(now int64, token string, n int, hold time.Duration, replaces string) Claimed {
		t.Helper()
		r, _ := l.at(t, now, ClaimRecord(&ClaimArgs{Task: "t", Token: token, Lease: time.Minute, Rows: n, Min: n, Select: sel, Hold: hold, Replaces: replaces}))
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		return r.Claimed
	}
	if c := claim(1, "a", 1, 10*time.Second, ""); c.Lease != "" || c.Waiting != "a" {
		t.Fatalf("a held claim of an empty partition: %+v", c)
	}
	if c := claim(2, "b", 2, 10*time.Second, ""); c.Waiting != "b" {
		t.Fatalf("a second held claim: %+v", c)
	}
	l.put(t, 3, "k1") // prepare, then the commit that fulfils a
	r, served := l.at(t, 4, DeleteRecord(nil))
	if r.Err != nil || len(served) != 0 {
		t.Fatalf("a record after: %v, fulfilled %v", r.Err, served)
	}
	_, served = l.at(t, 5, nil)
	if len(served) != 0 {
		t.Fatalf("a corrupt record fulfilled %v", served)
	}
	// a was fulfilled by the commit of k1. A claim replacing it (its
	// writer's copy may never have seen that fulfilment) hands it back
	// undelivered and leases afresh: k1, delivered once, not twice.
	if c := claim(6, "a2", 1, 0, "a"); !slices.Equal(keysOf(c), []string{"k1"}) || c.Deliveries[0].Deliveries != 1 {
		t.Fatalf("the claim replacing a fulfilled one leased %v (%+v), want k1 delivered once", keysOf(c), c.Deliveries)
	}
	// b needs two rows: one more commit fulfils it.
	l.n++
	pr := l.p.Apply(&backends.Entry{N: l.n, ID: l.n, Time: 7, Base: 1000, Data: PrepareRecord([]string{"k2", "k3"}, []string{"f"}, nil, 2)})
	rec, _ := CommitRecord([]metadata.RowUpdate{
		{Key: "k2", Index: pr.Reservations[0].Index, Fields: map[string]metadata.FieldInfo{"f": {}}},
		{Key: "k3", Index: pr.Reservations[1].Index, Fields: map[string]metadata.FieldInfo{"f": {}}}})
	_, served = l.at(t, 8, rec)
	if len(served) != 1 || served[0].Waiting != "b" || len(served[0].Rows) != 2 {
		t.Fatalf("the commit of two rows fulfilled %+v, want b with two rows", served)
	}
	// b's waiter gave up: its rows are ready again.
	if r, _ := l.at(t, 9, SettleRecord(&SettleArgs{Task: "t", Op: metadata.Unwait, Lease: "b"})); r.Err != nil {
		t.Fatal(r.Err)
	}
	if c := claim(10, "c", 2, 0, ""); len(c.Rows) != 2 {
		t.Fatalf("after b's Unwait: %v, want its two rows", keysOf(c))
	}
	// A held claim lapses after its Hold: a later commit fulfils nothing.
	if c := claim(11, "d", 1, time.Microsecond, ""); c.Waiting != "d" {
		t.Fatalf("held claim d: %+v", c)
	}
	l.put(t, 20, "k4")
	if c := claim(21, "e", 1, 0, ""); keysOf(c) == nil || keysOf(c)[0] != "k4" {
		t.Fatalf("after d lapsed, k4 should be ready: %v", keysOf(c))
	}
}

// A lease its caller never received goes back undelivered: an Unwait of
// a fulfilled standing claim, or of a lease's token with its indexes,
// makes the rows ready at once with their delivery counts as before (so a
// MaxDeliveries(1) row is not dead for it), while a row delivered before
// keeps that earlier delivery.
func TestUnwaitHandsBackUndelivered(t *testing.T) {
	l := &logged{p: New()}
	sel := Select{Fields: []string{"f"}}
	claim := func(now int64, token string, n int, hold time.Duration) Claimed {
		t.Helper()
		r, _ := l.at(t, now, ClaimRecord(&ClaimArgs{Task: "t", Token: token, Lease: time.Minute, Rows: n, Min: 1, MaxDeliveries: 2, Select: sel, Hold: hold}))
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		return r.Claimed
	}
	settle := func(now int64, op metadata.SettleOp, token string, idx ...uint64) metadata.SettleResult {
		t.Helper()
		r, _ := l.at(t, now, SettleRecord(&SettleArgs{Task: "t", Op: op, Lease: token, Indexes: idx}))
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		return r.Settled
	}
	deliveries := func(now int64) map[uint64]metadata.Delivery {
		out := map[uint64]metadata.Delivery{}
		for _, d := range l.p.Consumption(now, "t")["t"] {
			out[d.Index] = d
		}
		return out
	}
	if c := claim(1, "w", 2, 10*time.Second); c.Waiting != "w" {
		t.Fatalf("a held claim of an empty partition: %+v", c)
	}
	l.put(t, 2, "k1")
	ds := deliveries(3)
	if len(ds) != 1 {
		t.Fatalf("after the fill: %+v", ds)
	}
	// The waiter gave up as its claim was filled: the row goes back
	// never delivered.
	settle(4, metadata.Unwait, "w")
	if ds := deliveries(5); len(ds) != 0 {
		t.Fatalf("after the Unwait of a fulfilled claim: %+v, want no delivery", ds)
	}
	// Delivered once (nacked), then leased again and handed back: its one
	// real delivery stays, and it is ready, not dead, under a max of 2.
	c := claim(6, "a", 1, 0)
	if len(c.Rows) != 1 || c.Deliveries[0].Deliveries != 1 {
		t.Fatalf("claim a: %+v", c)
	}
	i := c.Rows[0].Index
	settle(7, metadata.Nack, "a", i)
	c = claim(8, "b", 1, 0)
	if len(c.Rows) != 1 || c.Deliveries[0].Deliveries != 2 {
		t.Fatalf("claim b: %+v", c)
	}
	if res := settle(9, metadata.Unwait, "b", i); len(res.Lost) != 0 {
		t.Fatalf("hand-back reported lost %v", res.Lost)
	}
	if d := deliveries(10)[i]; d.State != metadata.Ready || d.Deliveries != 1 {
		t.Fatalf("after the hand-back of b: %+v, want ready with 1 delivery", d)
	}
	// A hand-back by a token that does not hold the row changes nothing.
	c = claim(11, "c", 1, 0)
	if len(c.Rows) != 1 || c.Deliveries[0].Deliveries != 2 {
		t.Fatalf("claim c: %+v", c)
	}
	settle(12, metadata.Unwait, "b", i)
	if d := deliveries(13)[i]; d.State != metadata.Leased || d.Lease != "c" || d.Deliveries != 2 {
		t.Fatalf("a stale hand-back changed c's lease: %+v", d)
	}
}

// A rank's claim with a Hold never stands, so no record serves it a
// share that its writer might never read (its copy restarted from a
// snapshot past that record) and could not hand back: the record that
// opens the batch raises the count past the rank's mark, and the rank's
// next claim takes its share in its own result, in a copy restored from
// a snapshot as in the one that applied every record.
func TestRankClaimNeverStands(t *testing.T) {
	rank := func(l *logged, now int64, r int, token string) Claimed {
		t.Helper()
		res, served := l.at(t, now, ClaimRecord(&ClaimArgs{Task: "t", Token: token, Lease: time.Minute, Rows: 2, Min: 2,
			Batch: &metadata.Batch{Ranks: 2, Rank: r}, Select: Select{Fields: []string{"f"}}, Hold: 30 * time.Second}))
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		if len(served) != 0 {
			t.Fatalf("rank %d's claim %q served %+v", r, token, served)
		}
		return res.Claimed
	}
	l := &logged{p: New()}
	waited := rank(l, 1, 1, "w1")
	if waited.Lease != "" || waited.Waiting != "" {
		t.Fatalf("rank 1's held claim of an empty partition: %+v, want nothing leased and nothing standing", waited)
	}
	l.put(t, 2, "k1", "k2")
	opened := rank(l, 3, 0, "r0")
	if opened.Lease != "r0" || len(opened.Rows) != 2 {
		t.Fatalf("rank 0 opened %+v, want the batch of k1 and k2", opened)
	}
	if l.p.Seq() <= waited.Mark.Seq {
		t.Fatalf("the batch opened at count %d, rank 1 waits past %d: its Wait would not wake", l.p.Seq(), waited.Mark.Seq)
	}
	snap, err := l.p.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	restored, err := Restore(snap)
	if err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]*Partition{"applied": l.p, "restored": restored} {
		if c := rank(&logged{p: p, n: l.n}, 4, 1, "w2"); c.Lease != "r0" || len(c.Rows) != 2 {
			t.Errorf("%s copy: rank 1's claim after the batch opened: %+v, want its share of batch r0", name, c)
		}
	}
}

// Unheld cancels the standing claims whose tokens its caller does not
// hold, and only those: not a held one, not one fulfilled already (its
// lease may be in its caller's hands), not one lapsed.
func TestUnheld(t *testing.T) {
	l := &logged{p: New()}
	sel := Select{Fields: []string{"f"}}
	claim := func(now int64, token string, hold time.Duration) Claimed {
		t.Helper()
		r, _ := l.at(t, now, ClaimRecord(&ClaimArgs{Task: "t", Token: token, Lease: time.Minute, Rows: 1, Min: 1, Select: sel, Hold: hold}))
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		return r.Claimed
	}
	claim(1, "served", 10*time.Second)
	l.put(t, 2, "k1") // fulfils "served"
	claim(3, "lapsed", time.Microsecond)
	claim(4, "gone", 10*time.Second)
	claim(5, "held", 10*time.Second)
	recs := l.p.Unheld(func(token string) bool { return token == "held" })
	if len(recs) != 1 {
		t.Fatalf("%d records, want one: an unwait of gone", len(recs))
	}
	if r, _ := l.at(t, 6, recs[0]); r.Err != nil {
		t.Fatal(r.Err)
	}
	if got := l.p.Unheld(func(string) bool { return false }); len(got) != 1 {
		t.Fatalf("after gone's unwait, %d records for every token unheld, want one (held's)", len(got))
	}
	// The next row goes to held, not gone; served keeps k1.
	l.n++
	pr := l.p.Apply(&backends.Entry{N: l.n, ID: l.n, Time: 7, Base: 1000, Data: PrepareRecord([]string{"k2"}, []string{"f"}, nil, 1)})
	rec, _ := CommitRecord([]metadata.RowUpdate{{Key: "k2", Index: pr.Reservations[0].Index, Fields: map[string]metadata.FieldInfo{"f": {}}}})
	_, served := l.at(t, 8, rec)
	if len(served) != 1 || served[0].Waiting != "held" || !slices.Equal(keysOf(served[0]), []string{"k2"}) {
		t.Fatalf("the commit of k2 fulfilled %+v, want held with k2", served)
	}
	for _, d := range l.p.Consumption(9, "t")["t"] {
		if d.State != metadata.Leased {
			t.Fatalf("row %d: %v, want leased (k1 to served, k2 to held)", d.Index, d.State)
		}
	}
}
