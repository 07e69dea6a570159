package memory_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends/memory"
	"github.com/tqgo/tqgo/backends/metadata"
)

func pickEach(rows []*metadata.Row, _ []metadata.Delivery) (metadata.Picked, error) {
	var p metadata.Picked
	for i := range rows {
		p.Units = append(p.Units, []int{i})
	}
	return p, nil
}

func commitRow(t *testing.T, m *memory.MetaStore, part string, r metadata.Reservation, key string) {
	t.Helper()
	f := map[string]metadata.FieldInfo{}
	for name, g := range r.Gens {
		f[name] = metadata.FieldInfo{Gen: g}
	}
	if _, err := m.Commit(context.Background(), part, []metadata.RowUpdate{{Key: key, Index: r.Index, Fields: f}}); err != nil {
		t.Fatal(err)
	}
}

// A row prepared first (lower index) but committed after a higher one was
// acked is still delivered: the task's floor comes down to it.
func TestQueueFloorOutOfOrderCommit(t *testing.T) {
	ctx := context.Background()
	m := memory.NewMetaStore()
	res, err := m.Prepare(ctx, "p", []string{"a", "b"}, []string{"f"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	commitRow(t, m, "p", res[1], "b") // b (index 1) commits first
	req := metadata.ClaimRequest{Task: "t", Lease: time.Minute, Rows: 10, Min: 1}
	c, err := m.Claim(ctx, "p", req, pickEach)
	if err != nil || len(c.Rows) != 1 {
		t.Fatal(c, err)
	}
	if _, err := m.Settle(ctx, "p", metadata.SettleRequest{Task: "t", Op: metadata.Ack, Lease: c.Lease, Indexes: []uint64{c.Rows[0].Index}}); err != nil {
		t.Fatal(err)
	}
	if c, _ := m.Claim(ctx, "p", req, pickEach); len(c.Rows) != 0 { // moves the floor past b
		t.Fatal("unexpected", c.Rows)
	}
	commitRow(t, m, "p", res[0], "a") // now a (index 0) commits
	c, err = m.Claim(ctx, "p", req, pickEach)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Rows) != 1 {
		t.Fatalf("row a (index %d) committed and ready, but claim leased %d rows", res[0].Index, len(c.Rows))
	}
}

// A lease that expired on a dead row (MaxDeliveries) keeps its Until in
// the record; an empty claim's Mark must not wake at once for it, or a
// claim-and-Wait loop spins.
func TestQueueWaitAfterExpiredDead(t *testing.T) {
	ctx := context.Background()
	m := memory.NewMetaStore()
	res, _ := m.Prepare(ctx, "p", []string{"a"}, []string{"f"}, nil)
	commitRow(t, m, "p", res[0], "a")
	req := metadata.ClaimRequest{Task: "t", Lease: 10 * time.Millisecond, Rows: 1, Min: 1, MaxDeliveries: 1}
	if c, _ := m.Claim(ctx, "p", req, pickEach); len(c.Rows) != 1 {
		t.Fatal("no lease")
	}
	time.Sleep(20 * time.Millisecond) // expires: dead
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	var n atomic.Int64
	for wctx.Err() == nil {
		c, err := m.Claim(ctx, "p", req, pickEach)
		if err != nil || len(c.Rows) != 0 {
			t.Fatal(c, err)
		}
		n.Add(1)
		if err := m.Wait(wctx, "p", c.Mark); err != nil {
			break
		}
	}
	if n.Load() > 5 {
		t.Fatalf("nothing changed, yet the claim/Wait loop ran %d times in 200ms (Mark.Wake in the past)", n.Load())
	}
}

// A Drop racing a Delete leaves no state for a row the Delete removed
// once the Delete returned.
func TestQueueDropRacingDelete(t *testing.T) {
	ctx := context.Background()
	m := memory.NewMetaStore()
	res, _ := m.Prepare(ctx, "p", []string{"keep"}, []string{"f"}, nil)
	commitRow(t, m, "p", res[0], "keep")
	var cur atomic.Uint64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, _ = m.Settle(ctx, "p", metadata.SettleRequest{Task: "t", Op: metadata.Drop, Indexes: []uint64{cur.Load()}})
		}
	}()
	deleted := map[uint64]bool{}
	for i := range 5000 {
		res, _ := m.Prepare(ctx, "p", []string{"k"}, []string{"f"}, nil)
		commitRow(t, m, "p", res[0], "k")
		cur.Store(res[0].Index)
		time.Sleep(time.Duration(i%3) * time.Microsecond)
		if _, err := m.Delete(ctx, "p", []string{"k"}); err != nil {
			t.Fatal(err)
		}
		deleted[res[0].Index] = true
	}
	close(stop)
	<-done
	cons, _ := m.Consumption(ctx, "p", "t")
	n := 0
	for _, d := range cons["t"] {
		if deleted[d.Index] {
			n++
		}
	}
	if n > 0 {
		t.Fatalf("%d deleted rows have state (dropped) after their Delete returned", n)
	}
}
