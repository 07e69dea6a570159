package redis_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/redis"
	"github.com/tqgo/tqgo/internal/redistest"
)

// scriptCounter counts the scripts a client runs.
type scriptCounter struct{ scripts atomic.Int64 }

func (h *scriptCounter) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h *scriptCounter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		err := next(ctx, cmd)
		if n := cmd.Name(); (n == "evalsha" || n == "eval") && err == nil {
			h.scripts.Add(1) // a NOSCRIPT reply is followed by an EVAL
		}
		return err
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

// TestCommitAfterPrepare: a Commit of the rows of the Prepare before it
// merges onto the entries that Prepare saw and, the partition unchanged
// since, stores them in a transaction without a script; when another
// writer changed the rows in between, it still merges both.
func TestCommitAfterPrepare(t *testing.T) {
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
	// Both are transactions on the engine's own connection (go-redis
	// hooks do not see them): no script, no second try.
	if got := h.scripts.Load(); got != 0 {
		t.Errorf("Prepare+Commit of existing rows ran %d scripts, want none", got)
	}

	// A stale Prepare: another writer commits field c between this
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

// TestCommitAfterOtherProcess: the fast Commit must notice changes made
// through another client (another process) since its Prepare: a delete
// makes it a conflict, a newer commit of the same field makes its cells
// stale.
func TestCommitAfterOtherProcess(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	m1 := open(t, srv.URL()+"?prefix=two").Meta()
	m2 := open(t, srv.URL()+"?prefix=two").Meta()
	keys := keyRange("k", 200)

	res, err := m1.Prepare(ctx, "p", keys, []string{"f"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m2.Delete(ctx, "p", keys[:1]); err != nil {
		t.Fatal(err)
	}
	if _, err := m1.Commit(ctx, "p", fieldUpdate(keys, res, "f")); !errors.Is(err, backends.ErrConflict) {
		t.Fatalf("Commit after another client deleted a row: %v, want ErrConflict", err)
	}

	res1, err := m1.Prepare(ctx, "q", keys, []string{"f"})
	if err != nil {
		t.Fatal(err)
	}
	res2, err := m2.Prepare(ctx, "q", keys, []string{"f"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m2.Commit(ctx, "q", fieldUpdate(keys, res2, "f")); err != nil {
		t.Fatal(err)
	}
	cr, err := m1.Commit(ctx, "q", fieldUpdate(keys, res1, "f"))
	if err != nil {
		t.Fatal(err)
	}
	if len(cr.Stale) != len(keys) || len(cr.Superseded) != 0 {
		t.Fatalf("older Commit after a newer one: %d stale, %d superseded; want %d stale", len(cr.Stale), len(cr.Superseded), len(keys))
	}
	rows, err := m1.Lookup(ctx, "q", keys)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rows {
		if r == nil || r.Fields["f"].Gen != res2[i].Gens["f"] {
			t.Fatalf("row %q: %+v, want the newer generation %d", keys[i], r, res2[i].Gens["f"])
		}
	}
}

// TestWatchedTransactionsRace: another writer changes the partition between
// the reads of each plain-command transaction (fresh Prepare, Prepare of
// existing rows, Commit) and its MULTI: EXEC applies nothing and the call
// falls back to its script, with the same outcome as without the race.
func TestWatchedTransactionsRace(t *testing.T) {
	srv := redistest.Start(t)
	for _, direct := range []bool{true, false} {
		t.Run(fmt.Sprintf("direct=%v", direct), func(t *testing.T) {
			testWatchedRace(t, srv.URL(), direct)
		})
	}
}

func testWatchedRace(t *testing.T, url string, direct bool) {
	ctx := t.Context()
	prefix := fmt.Sprintf("?prefix=race%v&direct=%v", direct, direct)
	other := open(t, url+prefix).Meta()
	var armed atomic.Bool
	var fired atomic.Int64
	var n atomic.Int64
	s := open(t, url+prefix, redis.WithRoundHook(func(op string) {
		if op != "watched" || !armed.Load() {
			return
		}
		// Another process puts a row of its own into the partition.
		k := fmt.Sprintf("other%d", n.Add(1))
		res, err := other.Prepare(ctx, "p", []string{k}, []string{"f"})
		if err == nil {
			_, err = other.Commit(ctx, "p", fieldUpdate([]string{k}, res, "f"))
		}
		if err != nil {
			t.Errorf("the other writer: %v", err)
		}
		fired.Add(1)
	}))
	m := s.Meta()
	keys := keyRange("k", 200)
	step := func(f string) []backends.Reservation {
		t.Helper()
		armed.Store(true)
		res, err := m.Prepare(ctx, "p", keys, []string{f})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Commit(ctx, "p", fieldUpdate(keys, res, f)); err != nil {
			t.Fatal(err)
		}
		armed.Store(false)
		return res
	}
	first := step("a")  // fresh Prepare, then Commit, each raced
	second := step("b") // Prepare of existing rows, then Commit, each raced
	// Through go-redis, a Prepare of existing rows is the script alone.
	want := int64(3)
	if direct {
		want = 4
	}
	if fired.Load() < want {
		t.Fatalf("the race ran %d times, want at least %d", fired.Load(), want)
	}
	rows, err := m.Lookup(ctx, "p", keys)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rows {
		if r == nil || r.Index != first[i].Index || second[i].Index != first[i].Index || len(r.Fields) != 2 {
			t.Fatalf("row %q: %+v; want index %d with fields a and b", keys[i], r, first[i].Index)
		}
	}
	all, err := m.List(ctx, "p")
	if err != nil || len(all) != len(keys)+int(n.Load()) {
		t.Fatalf("List: %d rows, %v; want %d", len(all), err, len(keys)+int(n.Load()))
	}
}
