package redis_test

import (
	"context"
	"sync/atomic"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/internal/redistest"
)

// scriptCounter counts the scripts a client runs.
type scriptCounter struct{ n atomic.Int64 }

func (h *scriptCounter) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h *scriptCounter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if n := cmd.Name(); n == "evalsha" || n == "eval" {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h *scriptCounter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

func fieldUpdate(keys []string, res []backends.Reservation, f string) []backends.RowUpdate {
	ups := make([]backends.RowUpdate, len(keys))
	for i, k := range keys {
		ups[i] = backends.RowUpdate{Key: k, Index: res[i].Index, Fields: map[string]backends.FieldInfo{f: {DType: "uint8", Shape: []int64{4}, Gen: res[i].Gens[f]}}}
	}
	return ups
}

// TestCommitExistingOneRoundTrip: a Commit of rows that already have
// fields merges onto the entries its Prepare saw, so it runs one script;
// when another writer changed the rows in between, it still merges both.
func TestCommitExistingOneRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	s := open(t, srv.URL()+"?prefix=hints")
	m := s.Meta()
	keys := keyRange("k", 300)
	prepCommit := func(f string) {
		t.Helper()
		res, err := m.Prepare(ctx, "p", keys, []string{f})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Commit(ctx, "p", fieldUpdate(keys, res, f)); err != nil {
			t.Fatal(err)
		}
	}
	prepCommit("a")
	h := &scriptCounter{}
	s.Client().AddHook(h)
	prepCommit("b")
	if got := h.n.Load(); got != 2 {
		t.Errorf("Prepare+Commit of existing rows ran %d scripts, want 2", got)
	}

	// A stale hint: another writer commits field c between this
	// Prepare of d and its Commit.
	resD, err := m.Prepare(ctx, "p", keys, []string{"d"})
	if err != nil {
		t.Fatal(err)
	}
	prepCommit("c")
	if _, err := m.Commit(ctx, "p", fieldUpdate(keys, resD, "d")); err != nil {
		t.Fatal(err)
	}
	rows, err := m.Lookup(ctx, "p", keys)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rows {
		if r == nil || len(r.Fields) != 4 {
			t.Fatalf("row %q: %+v, want fields a, b, c, d", keys[i], r)
		}
	}
}
