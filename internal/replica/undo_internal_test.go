package replica

import (
	"context"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends/backendtest/toylog"
	"github.com/tqgo/tqgo/backends/metadata"
)

// A Settle Undo of a standing claim's token, through the Meta whose call
// registered it, forgets the registration as an Unwait does, whether the
// claim still waits or was fulfilled (its fulfilment is forgotten too),
// so that the partition's copy may be evicted.
func TestUndoForgetsRegistration(t *testing.T) {
	for _, fulfilled := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		e := toylog.NewServer(nil).Engine()
		m := New(e.Log, e.Data)
		tok := metadata.NewLease("c")
		req := metadata.ClaimRequest{Task: "t", Lease: time.Minute, Rows: 1, Min: 1, Holder: "c", Hold: time.Minute,
			Select: metadata.Select{Fields: []string{"x"}}, Token: tok}
		if c, err := m.Claim(ctx, "p", req, nil); err != nil || c.Waiting != tok {
			t.Fatalf("claim: %+v %v, want it standing under %q", c, err, tok)
		}
		if fulfilled {
			res, err := m.Prepare(ctx, "p", []string{"k"}, []string{"x"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := m.Commit(ctx, "p", []metadata.RowUpdate{{Key: "k", Index: res[0].Index,
				Fields: map[string]metadata.FieldInfo{"x": {Gen: res[0].Gens["x"]}}}}); err != nil {
				t.Fatal(err)
			}
		}
		p := m.part("p")
		p.mu.Lock()
		_, served := p.fulfilled[tok]
		registered := p.waits[tok]
		p.mu.Unlock()
		if !registered || served != fulfilled {
			t.Fatalf("fulfilled %v: registered %v, served %v", fulfilled, registered, served)
		}
		if _, err := m.Settle(ctx, "p", metadata.SettleRequest{Task: "t", Op: metadata.Undo, Lease: tok}); err != nil {
			t.Fatal(err)
		}
		p.mu.Lock()
		_, served = p.fulfilled[tok]
		registered = p.waits[tok]
		p.mu.Unlock()
		if registered || served {
			t.Errorf("fulfilled %v: after the undo, registered %v, served %v; want neither", fulfilled, registered, served)
		}
		cancel()
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
