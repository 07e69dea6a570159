package replica

import (
	"context"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends/backendtest/toylog"
	"github.com/tqgo/tqgo/backends/metadata"
)

// A Settle Undo of a standing claim's token, through the Meta whose call
// registered it, forgets the registration as an Unwait does, so that the
// partition's copy may be evicted (and no fulfilment is kept).
func TestUndoForgetsWaits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e := toylog.NewServer(nil).Engine()
	defer e.Close()
	m := New(e.Log, e.Data)
	defer m.Close()
	tok := metadata.NewLease("c")
	req := metadata.ClaimRequest{Task: "t", Lease: time.Minute, Rows: 1, Min: 1, Holder: "c", Hold: time.Minute,
		Select: metadata.Select{Fields: []string{"x"}}, Token: tok}
	c, err := m.Claim(ctx, "p", req, nil)
	if err != nil || c.Waiting != tok {
		t.Fatalf("claim: %+v %v, want it standing under %q", c, err, tok)
	}
	p := m.part("p")
	p.mu.Lock()
	registered := p.waits[tok]
	p.mu.Unlock()
	if !registered {
		t.Fatal("the standing claim is not registered")
	}
	if _, err := m.Settle(ctx, "p", metadata.SettleRequest{Task: "t", Op: metadata.Undo, Lease: tok}); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.waits[tok] {
		t.Errorf("after the undo p.waits still holds %q (%d tokens): the part is never evicted", tok, len(p.waits))
	}
	if _, ok := p.fulfilled[tok]; ok {
		t.Errorf("after the undo p.fulfilled still holds %q", tok)
	}
}

// As above, the standing claim fulfilled before the undo: its fulfilment
// is forgotten too.
func TestUndoForgetsFulfilled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e := toylog.NewServer(nil).Engine()
	defer e.Close()
	m := New(e.Log, e.Data)
	defer m.Close()
	tok := metadata.NewLease("c")
	req := metadata.ClaimRequest{Task: "t", Lease: time.Minute, Rows: 1, Min: 1, Holder: "c", Hold: time.Minute,
		Select: metadata.Select{Fields: []string{"x"}}, Token: tok}
	if c, err := m.Claim(ctx, "p", req, nil); err != nil || c.Waiting != tok {
		t.Fatalf("claim: %+v %v", c, err)
	}
	res, err := m.Prepare(ctx, "p", []string{"k"}, []string{"x"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Commit(ctx, "p", []metadata.RowUpdate{{Key: "k", Index: res[0].Index,
		Fields: map[string]metadata.FieldInfo{"x": {Gen: res[0].Gens["x"]}}}}); err != nil {
		t.Fatal(err)
	}
	p := m.part("p")
	p.mu.Lock()
	_, served := p.fulfilled[tok]
	p.mu.Unlock()
	if !served {
		t.Fatal("the standing claim was not fulfilled")
	}
	if _, err := m.Settle(ctx, "p", metadata.SettleRequest{Task: "t", Op: metadata.Undo, Lease: tok}); err != nil {
		t.Fatal(err)
	}
	ds, _ := m.Consumption(ctx, "p", "t")
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.fulfilled[tok]; ok || p.waits[tok] {
		t.Errorf("after the undo (rows handed back: %+v) p.fulfilled/p.waits still hold %q", ds["t"], tok)
	}
}
