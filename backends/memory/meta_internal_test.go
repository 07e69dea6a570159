package memory

import (
	"context"
	"fmt"
	"testing"

	"github.com/tqgo/tqgo/backends/metadata"
)

// A job that makes a partition per step and clears it must not grow the
// store: a cleared partition is kept while it has garbage, and forgotten
// once that is swept.
func TestClearedPartitionsForgotten(t *testing.T) {
	ctx := context.Background()
	m := NewMetaStore()
	for step := range 50 {
		p := fmt.Sprint("step-", step)
		res, err := m.Prepare(ctx, p, []string{"a", "b"}, []string{"f"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Commit(ctx, p, []metadata.RowUpdate{{Key: "a", Index: res[0].Index, Fields: map[string]metadata.FieldInfo{"f": {Gen: 0}}}}); err != nil {
			t.Fatal(err)
		}
		rows, err := m.DeletePartition(ctx, p) // b's reservation is an orphan
		if err != nil || len(rows) != 1 {
			t.Fatalf("DeletePartition: %d rows, %v", len(rows), err)
		}
		if !m.holds(p) {
			t.Fatalf("step %d: a cleared partition with garbage was forgotten", step)
		}
		if err := m.Swept(ctx, p, rows[0].Refs()); err != nil {
			t.Fatal(err)
		}
		garbage, err := m.Garbage(ctx, p, 0)
		if err != nil || len(garbage) != 1 {
			t.Fatalf("Garbage: %v, %v; want b's reservation", garbage, err)
		}
		if err := m.Swept(ctx, p, garbage); err != nil {
			t.Fatal(err)
		}
	}
	m.log.mu.Lock()
	defer m.log.mu.Unlock()
	if len(m.log.ends) != 0 {
		t.Errorf("%d partitions kept after every one was cleared and swept", len(m.log.ends))
	}
}

// holds reports whether the store keeps partition (its log: the replica
// forgets its copy with it).
func (m *MetaStore) holds(partition string) bool {
	m.log.mu.Lock()
	defer m.log.mu.Unlock()
	_, ok := m.log.ends[partition]
	return ok
}
