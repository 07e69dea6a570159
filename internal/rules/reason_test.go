package rules

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
)

// A row's last error: a nack's reason, kept through its next delivery and
// into death, cleared by an ack or a Retry; a lease that ended reads as
// "lease ended" at its end. Every copy agrees: one that applied the
// records, one that replayed them, one restored from a snapshot. A
// reason beyond the bound applies nothing.
func TestNackReason(t *testing.T) {
	now := time.Now().UnixMicro()
	p, quiet := New(), New()
	var next uint64
	putAll(t, p, &next, now, []string{"a", "b", "c"}, []string{"f"}, nil)
	next = 0
	putAll(t, quiet, &next, now, []string{"a", "b", "c"}, []string{"f"}, nil)
	n := uint64(100)
	apply := func(at int64, data []byte) Result {
		n++
		e := &backends.Entry{N: n, ID: n, Time: at, Data: data}
		quiet.Replay(e)
		return p.Apply(e)
	}
	claim := func(at int64, token string, rows int, lease time.Duration) Claimed {
		r := apply(at, ClaimRecord(&ClaimArgs{Task: "t", Token: token, Lease: lease, Rows: rows, Min: 1, MaxDeliveries: 2}))
		return r.Claimed
	}
	state := func(q *Partition, at int64) map[uint64]metadata.Delivery {
		out := map[uint64]metadata.Delivery{}
		for _, d := range q.Consumption(at)["t"] {
			out[d.Index] = d
		}
		return out
	}
	c := claim(now, "l1", 3, time.Hour)
	if len(c.Rows) != 3 {
		t.Fatalf("claimed %d rows", len(c.Rows))
	}
	a, b, cc := c.Rows[0].Index, c.Rows[1].Index, c.Rows[2].Index
	if r := apply(now, SettleRecord(&SettleArgs{Task: "t", Op: metadata.Nack, Lease: "l1", Indexes: []uint64{a}, Reason: strings.Repeat("x", metadata.MaxReason+1)})); !errors.Is(r.Err, backends.ErrInvalid) {
		t.Fatalf("a reason beyond the bound: %v, want ErrInvalid", r.Err)
	}
	if d := state(p, now)[a]; d.State != metadata.Leased || d.Reason != "" {
		t.Fatalf("after a refused nack: %+v, want still leased, no reason", d)
	}
	apply(now+1, SettleRecord(&SettleArgs{Task: "t", Op: metadata.Nack, Lease: "l1", Indexes: []uint64{a, b}, Reason: "boom 1"}))
	apply(now+2, SettleRecord(&SettleArgs{Task: "t", Op: metadata.Nack, Lease: "l1", Indexes: []uint64{cc}}))
	s := state(p, now+2)
	if d := s[a]; d.State != metadata.Ready || d.Reason != "boom 1" || d.At != time.UnixMicro(now+1) {
		t.Fatalf("a after a nack with a reason: %+v", d)
	}
	if d := s[cc]; d.Reason != "" || !d.At.IsZero() {
		t.Fatalf("c after a nack without one: %+v", d)
	}
	// Delivered again: a keeps its reason; then a second reason kills it,
	// b's lease ends (dead, "lease ended" at its end) and c is acked.
	claim(now+3, "l2", 3, time.Second)
	if d := state(p, now+3)[a]; d.State != metadata.Leased || d.Reason != "boom 1" {
		t.Fatalf("a leased again: %+v, want its reason kept", d)
	}
	apply(now+4, SettleRecord(&SettleArgs{Task: "t", Op: metadata.Nack, Lease: "l2", Indexes: []uint64{a}, Reason: "boom 2"}))
	apply(now+5, SettleRecord(&SettleArgs{Task: "t", Op: metadata.Ack, Lease: "l2", Indexes: []uint64{cc}}))
	later := now + 3 + time.Second.Microseconds() + 10
	apply(later, FenceRecord([]uint64{1})) // the clock moves past b's lease
	snap, err := p.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	restored, err := Restore(snap)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := restored.Snapshot(); !slices.Equal(again, snap) {
		t.Fatalf("a restored partition snapshots differently")
	}
	if q, _ := quiet.Snapshot(); !slices.Equal(q, snap) {
		t.Fatalf("the replaying copy holds another state")
	}
	for name, q := range map[string]*Partition{"applied": p, "replayed": quiet, "restored": restored} {
		s := state(q, later)
		if d := s[a]; d.State != metadata.Dead || d.Reason != "boom 2" || d.At != time.UnixMicro(now+4) {
			t.Errorf("%s: a %+v, want dead of boom 2", name, d)
		}
		if d := s[b]; d.State != metadata.Dead || d.Reason != metadata.ReasonLeaseEnded || d.At != time.UnixMicro(now+3+time.Second.Microseconds()) {
			t.Errorf("%s: b %+v, want dead, its lease ended", name, d)
		}
		if d := s[cc]; d.State != metadata.Acked || d.Reason != "" {
			t.Errorf("%s: c %+v, want acked, no reason", name, d)
		}
	}
	// A Retry clears it; a snapshot with no reason has 6-part entries
	// only, as before reasons.
	apply(later, SettleRecord(&SettleArgs{Task: "t", Op: metadata.Retry, Indexes: []uint64{a, b}}))
	if d := state(p, later)[a]; d.Reason != "" || !d.At.IsZero() {
		t.Fatalf("a retried: %+v, want no reason", d)
	}
	if snap, _ = p.Snapshot(); strings.Contains(string(snap), "boom") || strings.Contains(string(snap), metadata.ReasonLeaseEnded) {
		t.Fatalf("a snapshot with no reason left holds one")
	}
}
