package redis_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/tq"
)

// commitRows prepares and commits keys in partition p and returns their
// indexes, in keys' order.
func commitRows(t testing.TB, m metadata.MetaStore, p string, keys ...string) []uint64 {
	t.Helper()
	ctx := context.Background()
	res, err := m.Prepare(ctx, p, keys, []string{"x"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ups := make([]metadata.RowUpdate, len(keys))
	idx := make([]uint64, len(keys))
	for i, k := range keys {
		ups[i] = metadata.RowUpdate{Key: k, Index: res[i].Index, Fields: map[string]metadata.FieldInfo{"x": {Gen: res[i].Gens["x"]}}}
		idx[i] = res[i].Index
	}
	if _, err := m.Commit(ctx, p, ups); err != nil {
		t.Fatal(err)
	}
	return idx
}

// firstN picks the first n rows, one unit each.
func firstN(n int) metadata.Pick {
	return func(rows []*metadata.Row, _ []metadata.Delivery) (metadata.Picked, error) {
		var p metadata.Picked
		for i := range min(n, len(rows)) {
			p.Units = append(p.Units, []int{i})
		}
		return p, nil
	}
}

// all picks every row, one unit each.
func all(rows []*metadata.Row, d []metadata.Delivery) (metadata.Picked, error) {
	return firstN(len(rows))(rows, d)
}

func claimIdx(c metadata.Claimed) []uint64 {
	out := make([]uint64, len(c.Rows))
	for i, r := range c.Rows {
		out[i] = r.Index
		if c.Deliveries[i].Index != r.Index {
			panic(fmt.Sprintf("delivery %d names %d, row %d", i, c.Deliveries[i].Index, r.Index))
		}
	}
	return out
}

func states(t *testing.T, m metadata.MetaStore, p, task string) map[uint64]metadata.Delivery {
	t.Helper()
	c, err := m.Consumption(context.Background(), p, task)
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint64]metadata.Delivery{}
	for _, d := range c[task] {
		out[d.Index] = d
	}
	return out
}

// TestClaimPastOthersLeases: a client whose cache does not know that
// another client leased most of a partition's rows still claims a ready
// row at once: its claim asks its sampler for more each time it finds
// the candidates taken (tq's askFor), not only for 2n+16 rows.
func TestClaimPastOthersLeases(t *testing.T) {
	srv := redistest.Start(t)
	url := srv.URL() + "?prefix=qpast"
	a, b := openTQ(t, url), openTQ(t, url)
	ctx := t.Context()
	keys := keyRange("r", 400)
	ids := make([]int64, len(keys))
	if err := a.BatchPut(ctx, "p", keys, tq.Batch{"id": tq.Stacked(ids, len(keys))}, nil); err != nil {
		t.Fatal(err)
	}
	ta, err := a.Task("p", "t", []string{"id"})
	if err != nil {
		t.Fatal(err)
	}
	tb, err := b.Task("p", "t", []string{"id"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ta.Claim(ctx, 1); err != nil { // a's cache of the task's states
		t.Fatal(err)
	}
	held, err := tb.Claim(ctx, 250)
	if err != nil || len(held.Keys()) != 250 {
		t.Fatalf("b claimed %d rows: %v", len(held.Keys()), err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	l, err := ta.Wait(wctx, 1)
	if err != nil {
		t.Fatalf("a's wait with 149 rows ready: %v", err)
	}
	if got := l.Keys(); len(got) != 1 || slices.Contains(held.Keys(), got[0]) {
		t.Fatalf("a claimed %v, one of b's rows or not one row", got)
	}
}
