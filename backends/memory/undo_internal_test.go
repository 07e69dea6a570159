package memory

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends/metadata"
)

// After an undo, a partition whose rows are all removed is forgotten
// (MetaStore doc: "forgotten once a removal leaves it with no rows") once
// the undone token's ten minutes are over: the token does not keep it.
func TestUndoneTokenExpires(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	now := time.Unix(1_000_000, 0)
	m := NewMetaStore(WithClock(func() time.Time { mu.Lock(); defer mu.Unlock(); return now }))
	res, err := m.Prepare(ctx, "p", []string{"k"}, []string{"x"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Commit(ctx, "p", []metadata.RowUpdate{{Key: "k", Index: res[0].Index,
		Fields: map[string]metadata.FieldInfo{"x": {Gen: res[0].Gens["x"]}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Settle(ctx, "p", metadata.SettleRequest{Task: "t", Op: metadata.Undo, Lease: metadata.NewLease("c")}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	now = now.Add(time.Hour) // far past the undo's ten minutes
	mu.Unlock()
	if _, err := m.DeletePartition(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	refs, err := m.Garbage(ctx, "p", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Swept(ctx, "p", refs); err != nil {
		t.Fatal(err)
	}
	if m.holds("p") {
		t.Error("partition p, every row deleted and swept an hour after its undo, is still held")
	}
}
