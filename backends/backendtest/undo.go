package backendtest

import (
	"time"

	"github.com/tqgo/tqgo/backends/metadata"
)

// testUndo: a claim whose caller chose its token (ClaimRequest.Token) is
// undone by a Settle Undo of that token: what it leased goes back ready,
// undelivered; and a claim of an undone token that comes after (held up
// on its way) leases nothing and does not stand. Other claims go on.
func testUndo(x *qt) {
	p := x.part("undo")
	x.rows(p, "r", 2, "a")
	r := req("t", 1)
	r.Lease = time.Minute
	r.Holder = "w"
	r.Token = metadata.NewLease("w")
	c := x.claim(p, r, each)
	if c.Lease != r.Token || len(c.Rows) != 1 {
		x.t.Fatalf("a claim under its caller's token %q: %+v", r.Token, c)
	}
	x.settle(p, metadata.SettleRequest{Task: "t", Op: metadata.Undo, Lease: r.Token})
	if st := x.states(p, "t"); len(st) != 0 {
		x.t.Fatalf("after the undo: %+v, want both rows as never delivered", st)
	}

	// Undone before it comes: the claim leases nothing and does not stand.
	late := req("t", 2)
	late.Holder, late.Token, late.Hold = "w", metadata.NewLease("w"), time.Minute
	x.settle(p, metadata.SettleRequest{Task: "t", Op: metadata.Undo, Lease: late.Token})
	if c := x.claim(p, late, each); c.Lease != "" || c.Waiting != "" || len(c.Rows) != 0 {
		x.t.Fatalf("a claim of a token undone before it came: %+v, want nothing leased or standing", c)
	}
	if st := x.states(p, "t"); len(st) != 0 {
		x.t.Fatalf("after a claim of an undone token: %+v, want both rows ready", st)
	}
	// Another token claims as before.
	if c := x.claim(p, req("t", 2), each); len(c.Rows) != 2 {
		x.t.Fatalf("a claim after the undos: %+v, want both rows", c)
	}
	// An undo names a token: indexes are refused.
	if _, err := x.q.Settle(x.ctx, p, metadata.SettleRequest{Task: "t", Op: metadata.Undo, Lease: r.Token, Indexes: []uint64{1}}); err == nil {
		x.t.Fatal("an undo with indexes was accepted")
	}
}
