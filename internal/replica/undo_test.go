package replica_test

import (
	"context"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/backendtest/toylog"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/internal/replica"
)

// gatedAppend holds the next Append, when armed, before it reaches the
// log: a claim in flight at one server (or process).
type gatedAppend struct {
	backends.Log
	armed   chan struct{} // closed: the next Append waits
	waiting chan struct{}
	release chan struct{}
}

func (l *gatedAppend) Append(ctx context.Context, partition string, from backends.Pos, recs []backends.Record) (backends.Tail, error) {
	select {
	case <-l.armed:
		l.armed = make(chan struct{}) // once
		close(l.waiting)
		<-l.release
	default:
	}
	return l.Log.Append(ctx, partition, from, recs)
}

// The undo of a claim (Settle Undo) made by one process (or server) while
// the claim is still on its way at another lands in the log first, and
// the claim, landing after it, leases nothing: the row stays ready,
// undelivered. The undo is decided where the records land, so it holds
// whichever server the claim and the undo reach (a partition handed over
// between them).
func TestUndoBeforeClaimLandsElsewhere(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv := toylog.NewServer(nil)
	w := client(t, srv, nil)
	put(t, w, "p", "r0")
	e := srv.Engine()
	gate := &gatedAppend{Log: e.Log, armed: make(chan struct{}), waiting: make(chan struct{}), release: make(chan struct{})}
	a := replica.NewStore(gate, e.Data)
	b := replica.NewStore(e.Log, e.Data)
	defer a.Close()
	defer b.Close()
	req := metadata.ClaimRequest{Task: "t", Lease: time.Minute, Rows: 1, Min: 1, Holder: "c", Select: metadata.Select{Fields: []string{"x"}},
		Token: metadata.NewLease("c")}
	if _, err := a.Consumption(ctx, "p", "t"); err != nil { // a's copy caught up: its claim is one append
		t.Fatal(err)
	}
	close(gate.armed)
	got := make(chan error, 1)
	var c metadata.Claimed
	go func() {
		var err error
		c, err = a.Claim(ctx, "p", req, nil)
		got <- err
	}()
	<-gate.waiting
	if _, err := b.Settle(ctx, "p", metadata.SettleRequest{Task: "t", Op: metadata.Undo, Lease: req.Token}); err != nil {
		t.Fatal(err)
	}
	close(gate.release)
	if err := <-got; err != nil {
		t.Fatalf("the claim landing after its undo: %v", err)
	}
	if c.Lease != "" || c.Waiting != "" {
		t.Fatalf("the claim landing after its undo leased %q (standing %q), want nothing", c.Lease, c.Waiting)
	}
	ds, err := b.Consumption(ctx, "p", "t")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds["t"] {
		if d.State == metadata.Leased || d.Deliveries != 0 {
			t.Fatalf("row %d after the undo: %v, %d deliveries; want ready, undelivered", d.Index, d.State, d.Deliveries)
		}
	}
}

// An undo of a claim that landed first hands back what it leased, and its
// registration: ready again, undelivered.
func TestUndoAfterClaimLanded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv := toylog.NewServer(nil)
	w := client(t, srv, nil)
	put(t, w, "p", "r0")
	e := srv.Engine()
	a := replica.NewStore(e.Log, e.Data)
	b := replica.NewStore(e.Log, e.Data)
	defer a.Close()
	defer b.Close()
	req := metadata.ClaimRequest{Task: "t", Lease: time.Minute, Rows: 1, Min: 1, Holder: "c", Select: metadata.Select{Fields: []string{"x"}},
		Token: metadata.NewLease("c")}
	c, err := a.Claim(ctx, "p", req, nil)
	if err != nil || c.Lease != req.Token {
		t.Fatalf("claim: %+v, %v; want a lease under the caller's token", c, err)
	}
	if _, err := b.Settle(ctx, "p", metadata.SettleRequest{Task: "t", Op: metadata.Undo, Lease: req.Token}); err != nil {
		t.Fatal(err)
	}
	ds, err := a.Consumption(ctx, "p", "t")
	if err != nil {
		t.Fatal(err)
	}
	if len(ds["t"]) != 0 {
		t.Fatalf("after the undo: %+v, want the row as never delivered", ds["t"])
	}
}
