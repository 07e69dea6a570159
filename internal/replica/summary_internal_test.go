package replica

import (
	"reflect"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/internal/rules"
)

// A counts-only Summary, the state's own, is the Summary of the partition's
// View, times made local alike: rows ready, leased, dead of a nack and of a
// lease ended, groups waiting, under a clock skew.
func TestCountsSummaryMatchesView(t *testing.T) {
	st := rules.New()
	var n uint64
	at := int64(1_000_000_000)
	apply := func(data []byte) rules.Result {
		t.Helper()
		n++
		r := st.Apply(&backends.Entry{N: n, ID: n, Time: at, Base: 100 * n, Data: data})
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		return r
	}
	keys := []string{"g/a", "g/b", "h/c", "x", "y"}
	res := apply(rules.PrepareRecord(keys, []string{"f"}, nil, len(keys))).Reservations
	ups := make([]metadata.RowUpdate, len(keys))
	for i, k := range keys {
		ups[i] = metadata.RowUpdate{Key: k, Index: res[i].Index, Fields: map[string]metadata.FieldInfo{"f": {Gen: res[i].Gens["f"]}}}
	}
	rec, err := rules.CommitRecord(ups)
	if err != nil {
		t.Fatal(err)
	}
	apply(rec)
	c := apply(rules.ClaimRecord(&rules.ClaimArgs{Task: "t", Token: "t1", Lease: time.Minute, Rows: 2, Min: 1, MaxDeliveries: 1})).Claimed
	apply(rules.SettleRecord(&rules.SettleArgs{Task: "t", Op: metadata.Nack, Lease: "t1", Indexes: []uint64{c.Rows[0].Index}, Reason: "boom"}))
	apply(rules.ClaimRecord(&rules.ClaimArgs{Task: "t", Token: "t2", Lease: time.Second, Rows: 1, Min: 1, MaxDeliveries: 1}))
	apply(rules.ClaimRecord(&rules.ClaimArgs{Task: "g", Token: "g1", Lease: time.Minute, Rows: 2, Min: 1,
		Select: rules.Select{Group: metadata.Group{Sep: "/", Size: 2}}}))
	clock := time.UnixMicro(at).Add(5 * time.Second) // t2's lease ended
	p := &part{st: st, now: func() time.Time { return clock }, skew: 3 * time.Second, base: 7}
	p.skew = -p.skew // this process's clock behind the server's
	clock = clock.Add(p.skew)
	for _, req := range []metadata.SummaryRequest{
		{Counts: true},
		{Counts: true, Tasks: []string{"t", "never"}},
		{Counts: true, Tasks: []string{"g"}},
	} {
		now := p.serverNow()
		want := p.view(req.Tasks, true, true, true)
		if got, w := p.countsSummary(now, req), want.Summary(req); !reflect.DeepEqual(got, w) {
			t.Errorf("Summary(%+v) =\n%+v\nthe View's\n%+v", req, got, w)
		}
	}
	s := p.countsSummary(p.serverNow(), metadata.SummaryRequest{Counts: true, Tasks: []string{"t"}})
	ts := s.Tasks["t"]
	if ts.Dead != 2 || ts.DeadLeaseEnded != 1 || len(ts.Leases) != 1 || ts.LastDead == nil {
		t.Fatalf("task t: %+v, want 2 dead (1 of a lease ended), 1 lease", ts)
	}
}
