package redis_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/backends/redis"
	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/internal/replica"
)

// lostAppendReplyHook lets the first script call whose record argument starts
// with kind run on the server, runs after, and then reports the call
// failed as if the connection had dropped before the reply: the write
// applied and its client does not know.
type lostAppendReplyHook struct {
	kind  byte
	armed atomic.Bool
	after func()
}

func (h *lostAppendReplyHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h *lostAppendReplyHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

func (h *lostAppendReplyHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil && h.recordKind(cmd) == h.kind && h.armed.CompareAndSwap(true, false) {
			h.after()
			return io.ErrUnexpectedEOF
		}
		return err
	}
}

// recordKind is the first byte of an append script call's first record
// (ARGV[11]), or 0 for any other command.
func (h *lostAppendReplyHook) recordKind(cmd goredis.Cmder) byte {
	args := cmd.Args()
	if len(args) < 3 || !strings.EqualFold(cmd.Name(), "evalsha") {
		return 0
	}
	nk, ok := args[2].(int)
	if !ok || len(args) < 3+nk+11 {
		return 0
	}
	switch rec := args[3+nk+10].(type) { // the first record's data (LAYOUT.md section 9)
	case string:
		if len(rec) > 0 {
			return rec[0]
		}
	case []byte:
		if len(rec) > 0 {
			return rec[0]
		}
	}
	return 0
}

// TestCommitReplyLostThenLogCompacted: a Commit applies, its reply is
// lost, and before the writer settles the outcome another client's write
// compacts the log (a snapshot under a new epoch, which holds the commit
// but not its record's id). The settling script then cannot find the
// write's record; the commit did apply, so Commit must not report a
// definite failure (tq would delete the cells of a committed row).
func TestCommitReplyLostThenLogCompacted(t *testing.T) {
	defer replica.SetDefaultCompactAfter(1)()
	srv := redistest.Start(t)
	ctx := t.Context()

	other, err := redis.OpenURL(ctx, "redis://"+srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	defer other.Log().Close()

	hook := &lostAppendReplyHook{kind: 'C'}
	hook.after = func() {
		// Another client's Prepare lengthens the log to compactAt; its
		// writer then compacts it.
		if _, err := metaOf(other).Prepare(ctx, "p", []string{"other"}, []string{"f"}, nil); err != nil {
			t.Errorf("other client's prepare: %v", err)
		}
	}
	client := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer client.Close()
	client.AddHook(hook)
	s, err := redis.New(client, redis.WithDirectConnections(false)) // appends through go-redis and its hook
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m := metaOf(s)
	defer m.Close()

	res, err := m.Prepare(ctx, "p", []string{"k"}, []string{"f"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	hook.armed.Store(true)
	_, err = m.Commit(ctx, "p", []metadata.RowUpdate{{Key: "k", Index: res[0].Index,
		Fields: map[string]metadata.FieldInfo{"f": {Gen: res[0].Gens["f"]}}}})
	if hook.armed.Load() {
		t.Fatal("the commit's reply was never lost: the test did not run")
	}
	rows, lerr := metaOf(other).Lookup(ctx, "p", []string{"k"})
	if lerr != nil {
		t.Fatal(lerr)
	}
	committed := rows[0] != nil
	if !committed {
		t.Fatal("the commit did not apply: the test did not run")
	}
	if err != nil && !errors.Is(err, backends.ErrOutcomeUnknown) {
		t.Fatalf("Commit applied but returned a definite error (the caller deletes the row's cells): %v", err)
	}
}

// lostPipelineReplyHook lets the first pipeline run on the server and
// then fails its commands as if the connection had dropped before the
// replies.
type lostPipelineReplyHook struct{ armed atomic.Bool }

func (h *lostPipelineReplyHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h *lostPipelineReplyHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return next
}
func (h *lostPipelineReplyHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		err := next(ctx, cmds)
		if err == nil && h.armed.CompareAndSwap(true, false) {
			for _, c := range cmds {
				c.SetErr(io.ErrUnexpectedEOF)
			}
			return io.ErrUnexpectedEOF
		}
		return err
	}
}

// TestReplicatedCommitReplyLost: with WithReplicas, a commit whose reply
// (and its WAIT's) was lost is settled by finding its record; no replica
// acknowledged it (the server has none), so Commit must not report it
// replicated: its error matches ErrNotReplicated and
// backends.ErrOutcomeUnknown, as when the WAIT's reply comes.
func TestReplicatedCommitReplyLost(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	hook := &lostPipelineReplyHook{}
	client := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer client.Close()
	client.AddHook(hook)
	s, err := redis.New(client, redis.WithReplicas(1, 20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m := metaOf(s)
	defer m.Close()
	// With replicas, a Prepare waits too: reserve through a store without
	// them, and bring m's view up to date with a read (which waits for
	// none).
	plain, err := redis.OpenURL(ctx, "redis://"+srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	defer plain.Log().Close()
	res, err := metaOf(plain).Prepare(ctx, "p", []string{"k"}, []string{"f"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Lookup(ctx, "p", []string{"k"}); err != nil {
		t.Fatal(err)
	}
	up := []metadata.RowUpdate{{Key: "k", Index: res[0].Index, Fields: map[string]metadata.FieldInfo{"f": {Gen: res[0].Gens["f"]}}}}
	hook.armed.Store(true)
	_, err = m.Commit(ctx, "p", up)
	if hook.armed.Load() {
		t.Fatal("the commit's reply was never lost: the test did not run")
	}
	if !errors.Is(err, redis.ErrNotReplicated) || !errors.Is(err, backends.ErrOutcomeUnknown) {
		t.Fatalf("Commit on a server with no replica, reply lost: %v, want ErrNotReplicated and ErrOutcomeUnknown", err)
	}
}
