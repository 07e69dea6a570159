package rules

import (
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
)

// A custom Wait's claim replacing a served claim (its writer's copy
// restarted past the fulfilment): the served rows go back ready where the
// record lands, but the claim leases only its pick (made while they were
// leased), so it registers with a mark that already counts the hand-back.
func TestCustomReplacesServedWakes(t *testing.T) {
	p := New()
	var next uint64
	now := time.Now().UnixMicro()
	n := uint64(0)
	apply := func(data []byte) Result {
		n++
		return p.Apply(&backends.Entry{N: n, ID: n, Time: now, Data: data})
	}
	apply(ClaimRecord(&ClaimArgs{Task: "t", Token: "X", Lease: time.Hour, Rows: 1, Min: 1, Hold: time.Hour}))
	putAll(t, p, &next, now, []string{"a"}, []string{"f"}, nil)
	apply(SettleRecord(&SettleArgs{Task: "other", Op: 1, Lease: "none"}))
	if got := p.TakeFulfilled(); len(got) != 1 {
		t.Fatalf("X not served: %+v", got)
	}
	// The copy's pick: nothing ready (a is leased to X) -> no units.
	c := apply(ClaimRecord(&ClaimArgs{Task: "t", Token: "Y", Lease: time.Hour, Rows: 1, Min: 1, Hold: time.Hour,
		Custom: true, Replaces: "X"})).Claimed
	t.Logf("Y: lease %q waiting %q mark %d (seq now %d), ready %d", c.Lease, c.Waiting, c.Mark.Seq, p.seq, p.Ready("t"))
	if c.Lease == "" && p.Ready("t") > 0 && c.Mark.Seq == p.seq {
		t.Fatalf("Y leased nothing, %d rows ready, and its mark %d already counts them: its Wait sleeps", p.Ready("t"), c.Mark.Seq)
	}
}
