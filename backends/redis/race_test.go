package redis_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/backends/redis"
	"github.com/tqgo/tqgo/internal/redistest"
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
	res, err := m.Prepare(ctx, p, keys, []string{"f"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Commit(ctx, p, fieldUpdate(keys, res, "f")); err != nil {
		t.Fatal(err)
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
