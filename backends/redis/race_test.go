package redis_test

import (
	"context"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/backends/redis"
	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/internal/replica"
)

// afterScript runs f once, right after the server ran a metadata script
// matching match (and before the caller sees the reply): another
// goroutine of the same process acting in that window.
type afterScript struct {
	armed atomic.Bool
	fired atomic.Int64
	match func(args []any) bool
	f     func()
}

func (h *afterScript) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h *afterScript) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		err := next(ctx, cmd)
		if n := cmd.Name(); (n == "evalsha" || n == "eval") && err == nil && h.match(cmd.Args()) && h.armed.CompareAndSwap(true, false) {
			h.f()
			h.fired.Add(1)
		}
		return err
	}
}
func (h *afterScript) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// readScriptArgs matches the read script (3 keys: l, e, h; 2 arguments).
func readScriptArgs(args []any) bool {
	nk, ok := args[2].(int)
	return ok && nk == 3 && len(args) == 3+3+2
}

// clearArgs matches an append of DeletePartition's record (ARGV[5] a
// clear record, "X<id>"; 7 keys inline).
func clearArgs(args []any) bool {
	nk, ok := args[2].(int)
	if !ok || nk != 7 || len(args) < 3+7+5 {
		return false
	}
	rec, _ := args[3+7+4].(string)
	return len(rec) > 0 && rec[0] == 'X'
}

func commitOne(t *testing.T, m metadata.MetaStore, p string, keys ...string) {
	t.Helper()
	ctx := t.Context()
	res, err := m.Prepare(ctx, p, keys, []string{"f"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Commit(ctx, p, fieldUpdate(keys, res, "f")); err != nil {
		t.Fatal(err)
	}
}

// TestReadRacingOwnWrite: a Lookup (and a List) of a committed row,
// while another goroutine of the same Meta appends to the partition
// between the read script and the read applying its reply. The view is
// then ahead of the reply (it installed the write) and must keep what it
// has: a row committed before the read began stays visible.
func TestReadRacingOwnWrite(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	s := open(t, srv.URL()+"?prefix=rvread")
	m := metaOf(s)
	commitOne(t, m, "p", "a")
	n := 0
	h := &afterScript{match: readScriptArgs, f: func() {
		n++
		if _, err := m.Prepare(ctx, "p", []string{"z" + strconv.Itoa(n)}, []string{"f"}); err != nil {
			t.Errorf("concurrent Prepare: %v", err)
		}
	}}
	s.Client().AddHook(h)

	h.armed.Store(true)
	rows, err := m.Lookup(ctx, "p", []string{"a"})
	if err != nil {
		t.Fatal(err)
	}
	if h.fired.Load() != 1 {
		t.Fatalf("the race ran %d times, want 1", h.fired.Load())
	}
	if rows[0] == nil {
		t.Errorf("Lookup of a row committed before it began: nil (the view was emptied by the concurrent write)")
	}

	h.armed.Store(true)
	all, err := m.List(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if h.fired.Load() != 2 {
		t.Fatalf("the race ran %d times, want 2", h.fired.Load())
	}
	if len(all) != 1 {
		t.Errorf("List with a concurrent Prepare: %d rows, want 1 (row a)", len(all))
	}
}

// TestDeletePartitionRacingRead: a read of the same Meta between
// DeletePartition's script and its use of the reply moves the view (to
// the deleted log's empty state); DeletePartition must still return the
// rows it deleted, or the caller never deletes their cells.
func TestDeletePartitionRacingRead(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	s := open(t, srv.URL()+"?prefix=rvdrop")
	m := metaOf(s)
	commitOne(t, m, "p", "a")
	h := &afterScript{match: clearArgs, f: func() {
		if _, err := m.Lookup(ctx, "p", []string{"a"}); err != nil {
			t.Errorf("concurrent Lookup: %v", err)
		}
	}}
	s.Client().AddHook(h)
	h.armed.Store(true)
	rows, err := m.DeletePartition(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if h.fired.Load() != 1 {
		t.Fatalf("the race ran %d times, want 1", h.fired.Load())
	}
	if len(rows) != 1 || rows[0].Key != "a" {
		t.Errorf("DeletePartition racing a Lookup returned %v, want row a (which it deleted)", rows)
	}
}

// TestDeleteDuplicateKeys: Delete with a key twice removes and returns
// the row once (as backends/memory does), and the committed-row counter
// drops by one: Partitions still lists the partition while row b is
// committed.
func TestDeleteDuplicateKeys(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	for _, tc := range []struct {
		name string
		opts []redis.Option
	}{{"inline", nil}, {"clusterpath", []redis.Option{redis.WithClusterSafe()}}} {
		t.Run(tc.name, func(t *testing.T) {
			m := metaOf(open(t, srv.URL()+"?prefix=rvdup"+tc.name, tc.opts...))
			commitOne(t, m, "p", "a", "b")
			rows, err := m.Delete(ctx, "p", []string{"a", "a"})
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != 1 {
				t.Errorf("Delete([a a]) returned %d rows, want 1", len(rows))
			}
			parts, err := m.Partitions(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(parts, "p") {
				t.Errorf("Partitions = %v after Delete([a a]); want p (row b is committed)", parts)
			}
		})
	}
}

// TestReadRacingCompaction: as TestReadRacingOwnWrite, but the
// concurrent write makes the log long enough to compact, so the view
// moves to the snapshot's epoch before the Lookup applies its reply: the
// reply says nothing about the new log, and the Lookup asks again rather
// than answer from a view it cannot place.
func TestReadRacingCompaction(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	s := open(t, srv.URL()+"?prefix=rvcompact")
	m := metaOf(s)
	commitOne(t, m, "p", "a")                                                    // log: 2 records
	if _, err := m.Prepare(ctx, "p", []string{"b"}, []string{"f"}); err != nil { // 3
		t.Fatal(err)
	}
	defer replica.SetDefaultCompactAfter(1)()
	h := &afterScript{match: readScriptArgs, f: func() {
		// The 4th record: the writer compacts the log right after.
		if _, err := m.Prepare(ctx, "p", []string{"c"}, []string{"f"}); err != nil {
			t.Errorf("concurrent Prepare: %v", err)
		}
	}}
	s.Client().AddHook(h)
	h.armed.Store(true)
	rows, err := m.Lookup(ctx, "p", []string{"a"})
	if err != nil {
		t.Fatal(err)
	}
	if h.fired.Load() != 1 {
		t.Fatalf("the race ran %d times, want 1", h.fired.Load())
	}
	if n, _ := s.Client().LLen(ctx, "rvcompact:{rvcompact:p}:l").Result(); n != 1 {
		t.Fatalf("log of %d records after the concurrent write, want 1 (compacted)", n)
	}
	if rows[0] == nil {
		t.Errorf("Lookup of a row committed before it began, racing a compaction: nil")
	}
}
