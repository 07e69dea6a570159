package rules

import (
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
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
	claim("served", 3, 3, time.Hour) // c and d ready: it waits for a third
	putAll(t, p, &next, now, []string{"e"}, []string{"f"}, nil)
	apply(SettleRecord(&SettleArgs{Task: "other", Op: metadata.Nack, Lease: "none"})) // any entry: the Wait is served after it
	if got := p.TakeFulfilled(); len(got) != 1 || len(got[0].Rows) != 3 {
		t.Fatalf("the standing claim was not served c, d and e: %+v", got)
	}
	claim("waiting", 1, 1, time.Hour) // nothing ready: it waits
	if p.Ready("t") != 0 {
		t.Fatalf("%d ready", p.Ready("t"))
	}
	recs := p.Release()
	for _, r := range recs {
		apply(r)
		if got := p.TakeFulfilled(); len(got) > 0 {
			t.Fatalf("a released claim was served: %+v", got)
		}
	}
	putAll(t, p, &next, now, []string{"g"}, []string{"f"}, nil)
	got := p.Claim(now, &ClaimArgs{Task: "t", Token: "new", Lease: time.Hour, Rows: 6, Min: 1})
	if len(got.Rows) != 6 {
		t.Fatalf("after the release a claim leased %d rows, want 6 (records %q)", len(got.Rows), recs)
	}
	// Every row leased before (by a claim or to a served Wait, which its
	// dead holder may have received) keeps its delivery: this is its second.
	for i, r := range got.Rows {
		want := 2
		if r.Key == "g" {
			want = 1
		}
		if got.Deliveries[i].Deliveries != want {
			t.Errorf("row %s: delivery %d, want %d", r.Key, got.Deliveries[i].Deliveries, want)
		}
	}
	if len(p.Release()) != 1 {
		t.Fatalf("release after a new claim: %q, want one nack", p.Release())
	}
}
