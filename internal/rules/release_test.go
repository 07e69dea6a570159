package rules

import (
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
)

// Release ends every claim: the rows leased become ready at once, their
// deliveries kept, and a registered claim is gone (it would otherwise
// lease the released rows to its dead holder).
func TestReleaseEndsClaims(t *testing.T) {
	p := New()
	var next uint64
	now := time.Now().UnixMicro()
	putAll(t, p, &next, now, []string{"a", "b", "c", "d"}, []string{"f"}, nil)
	n := uint64(0)
	apply := func(data []byte) Result {
		n++
		return p.Apply(&backends.Entry{N: n, ID: n, Time: now, Data: data})
	}
	claim := func(token string, rows, min int, hold time.Duration) []Claimed {
		apply(ClaimRecord(&ClaimArgs{Task: "t", Token: token, Lease: time.Hour, Rows: rows, Min: min, Hold: hold}))
		return p.TakeFulfilled()
	}
	first := p.Claim(now, &ClaimArgs{Task: "t", Token: "held", Lease: time.Hour, Rows: 2, Min: 1})
	if len(first.Rows) != 2 {
		t.Fatalf("first claim leased %d rows", len(first.Rows))
	}
	claim("waiting", 3, 3, time.Hour) // 2 ready: it waits
	if p.Ready("t") != 2 {
		t.Fatalf("%d ready", p.Ready("t"))
	}
	recs := p.Release()
	for _, r := range recs {
		apply(r)
		if got := p.TakeFulfilled(); len(got) > 0 {
			t.Fatalf("a released claim was served: %+v", got)
		}
	}
	got := p.Claim(now, &ClaimArgs{Task: "t", Token: "new", Lease: time.Hour, Rows: 4, Min: 1})
	if len(got.Rows) != 4 {
		t.Fatalf("after the release a claim leased %d rows, want 4 (records %q)", len(got.Rows), recs)
	}
	for i, r := range got.Rows {
		want := 1
		if r.Key == first.Rows[0].Key || r.Key == first.Rows[1].Key {
			want = 2
		}
		if got.Deliveries[i].Deliveries != want {
			t.Errorf("row %s: delivery %d, want %d", r.Key, got.Deliveries[i].Deliveries, want)
		}
	}
	if len(p.Release()) != 1 {
		t.Fatalf("release after a new claim: %q, want one nack", p.Release())
	}
}
