package tq_test

import (
	"context"
	"errors"
	"testing"

	"github.com/tqgo/tqgo/backends/memory"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/tq"
)

// lostCommitMeta: the first Commit is not applied and reports a timeout
// (settled: nothing applied); before it returns, another writer clears the
// row and writes it again (a new row, a new index, the same field
// generation 0).
type lostCommitMeta struct {
	metadata.MetaStore
	hook func()
	done bool
}

func (m *lostCommitMeta) Commit(ctx context.Context, partition string, updates []metadata.RowUpdate) (metadata.CommitResult, error) {
	if m.done {
		return m.MetaStore.Commit(ctx, partition, updates)
	}
	m.done = true
	m.hook()
	return metadata.CommitResult{}, context.DeadlineExceeded // nothing applied
}

// A put whose commit timed out without being applied must not be taken for
// applied because a *different* row (same key, re-created with another
// index) holds the same generation of the field: the put must fail and
// delete its cells, not report success and leak them.
func TestCommitOutcomeChecksRowIndex(t *testing.T) {
	ctx := context.Background()
	inner := memory.NewMetaStore()
	st := memory.New()
	other := newClient(t, st, inner)
	mustPut(t, other, "p", []string{"k"}, tq.Batch{"x": tq.Stacked([]int64{1}, 1)}, nil)
	meta := &lostCommitMeta{MetaStore: inner}
	c := newClient(t, st, meta)
	// The put under test writes a new row: clear "k" first so its Prepare
	// makes a fresh row, then the hook clears it and re-creates it.
	if err := other.Clear(ctx, "p", []string{"k"}); err != nil {
		t.Fatal(err)
	}
	meta.hook = func() {
		if err := other.Clear(ctx, "p", []string{"k"}); err != nil {
			t.Error(err)
		}
		mustPut(t, other, "p", []string{"k"}, tq.Batch{"x": tq.Stacked([]int64{3}, 1)}, nil)
	}
	err := c.BatchPut(ctx, "p", []string{"k"}, tq.Batch{"x": tq.Stacked([]int64{2}, 1)}, nil)
	got := flat[int64](t, mustGet(t, other, "p", []string{"k"}, "x")["x"])
	if got[0] != 3 {
		t.Fatalf("read %v, want the other writer's [3]", got)
	}
	if err == nil {
		t.Errorf("BatchPut reported success, but its commit was never applied (its value 2 is nowhere)")
	}
	if !errors.Is(err, context.DeadlineExceeded) && err != nil {
		t.Errorf("BatchPut: %v, want the commit's timeout", err)
	}
	if n := st.Len(); n != 1 {
		t.Errorf("store holds %d cells, want 1 (the live row's): the failed put's cell leaked", n)
	}
}
