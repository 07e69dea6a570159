package redis_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/backends/redis"
	"github.com/tqgo/tqgo/internal/redistest"
)

// scriptCounter counts the scripts a client runs (given with
// redis.WithHooks, it sees those on the direct connections too), and
// runs before, when set, before each append script.
type scriptCounter struct {
	scripts atomic.Int64
	before  func()
}

func (h *scriptCounter) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h *scriptCounter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		n := cmd.Name()
		script := n == "evalsha" || n == "eval"
		if script && h.before != nil && n == "evalsha" && redis.ScriptName(fmt.Sprint(cmd.Args()[1])) == "append" {
			h.before()
		}
		err := next(ctx, cmd)
		if script && err == nil {
			h.scripts.Add(1) // a NOSCRIPT reply is followed by an EVAL
		}
		return err
	}
}
func (h *scriptCounter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

func fieldUpdate(keys []string, res []metadata.Reservation, f string) []metadata.RowUpdate {
	ups := make([]metadata.RowUpdate, len(keys))
	for i, k := range keys {
		ups[i] = metadata.RowUpdate{Key: k, Index: res[i].Index, Fields: map[string]metadata.FieldInfo{f: {DType: "uint8", Shape: []int64{4}, Gen: res[i].Gens[f]}}}
	}
	return ups
}

// TestOneScriptPerWrite: a Prepare and a Commit each take one script (one
// round trip), new rows or existing ones; when another writer appended in
// between, the write applies where it lands and still merges both.
func TestOneScriptPerWrite(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	h := &scriptCounter{}
	s := open(t, srv.URL()+"?prefix=hints", redis.WithHooks(h))
	m := metaOf(s)
	keys := keyRange("k", 300)
	// Scripts loaded (a first EVALSHA meets NOSCRIPT).
	if _, err := m.Prepare(ctx, "warm", []string{"w"}, []string{"f"}, nil); err != nil {
		t.Fatal(err)
	}
	prepCommit := func(f string) {
		t.Helper()
		res, err := m.Prepare(ctx, "p", keys, []string{f}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Commit(ctx, "p", fieldUpdate(keys, res, f)); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"a", "b"} { // new rows, then existing ones
		before := h.scripts.Load()
		prepCommit(f)
		if got := h.scripts.Load() - before; got != 2 {
			t.Errorf("Prepare+Commit of field %s ran %d scripts, want 2", f, got)
		}
	}

	// A stale Prepare: another writer commits field c between this
	// Prepare of d and its Commit.
	resD, err := m.Prepare(ctx, "p", keys, []string{"d"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	other := metaOf(open(t, srv.URL()+"?prefix=hints"))
	res, err := other.Prepare(ctx, "p", keys, []string{"c"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Commit(ctx, "p", fieldUpdate(keys, res, "c")); err != nil {
		t.Fatal(err)
	}
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
	m1 := metaOf(open(t, srv.URL()+"?prefix=two"))
	m2 := metaOf(open(t, srv.URL()+"?prefix=two"))
	keys := keyRange("k", 200)

	res, err := m1.Prepare(ctx, "p", keys, []string{"f"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m2.Delete(ctx, "p", keys[:1]); err != nil {
		t.Fatal(err)
	}
	if _, err := m1.Commit(ctx, "p", fieldUpdate(keys, res, "f")); !errors.Is(err, backends.ErrConflict) {
		t.Fatalf("Commit after another client deleted a row: %v, want ErrConflict", err)
	}

	res1, err := m1.Prepare(ctx, "q", keys, []string{"f"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res2, err := m2.Prepare(ctx, "q", keys, []string{"f"}, nil)
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

// TestWriteRaces: another writer appends to the partition between each
// write's computation against this client's copy and its append (fresh
// Prepare, Prepare of existing rows, Commit): the write applies where it
// lands in the log, with the same outcome as without the race.
func TestWriteRaces(t *testing.T) {
	srv := redistest.Start(t)
	for _, direct := range []bool{true, false} {
		t.Run(fmt.Sprintf("direct=%v", direct), func(t *testing.T) {
			testWriteRace(t, srv.URL(), direct)
		})
	}
}

func testWriteRace(t *testing.T, url string, direct bool) {
	ctx := t.Context()
	prefix := fmt.Sprintf("?prefix=race%v&direct=%v", direct, direct)
	other := metaOf(open(t, url+prefix))
	var armed atomic.Bool
	var fired atomic.Int64
	var n atomic.Int64
	h := &scriptCounter{before: func() {
		if !armed.CompareAndSwap(true, false) {
			return // once per write
		}
		// Another process puts a row of its own into the partition.
		k := fmt.Sprintf("other%d", n.Add(1))
		res, err := other.Prepare(ctx, "p", []string{k}, []string{"f"}, nil)
		if err == nil {
			_, err = other.Commit(ctx, "p", fieldUpdate([]string{k}, res, "f"))
		}
		if err != nil {
			t.Errorf("the other writer: %v", err)
		}
		fired.Add(1)
	}}
	s := open(t, url+prefix, redis.WithHooks(h))
	m := metaOf(s)
	keys := keyRange("k", 200)
	step := func(f string) []metadata.Reservation {
		t.Helper()
		armed.Store(true)
		res, err := m.Prepare(ctx, "p", keys, []string{f}, nil)
		if err != nil {
			t.Fatal(err)
		}
		armed.Store(true)
		if _, err := m.Commit(ctx, "p", fieldUpdate(keys, res, f)); err != nil {
			t.Fatal(err)
		}
		return res
	}
	first := step("a")
	second := step("b")
	if fired.Load() != 4 {
		t.Fatalf("the race ran %d times, want 4", fired.Load())
	}
	rows, err := m.Lookup(ctx, "p", keys)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rows {
		if r == nil || r.Index != first[i].Index || second[i].Index != first[i].Index || len(r.Fields) != 2 {
			t.Fatalf("row %q: %+v; want index %d with fields a and b", keys[i], r, first[i].Index)
		}
		if second[i].Gens["b"] != 0 || r.Fields["b"].Gen != 0 {
			t.Fatalf("row %q: field b at generation %d (committed %d), want 0", keys[i], second[i].Gens["b"], r.Fields["b"].Gen)
		}
	}
	all, err := m.List(ctx, "p")
	if err != nil || len(all) != len(keys)+int(n.Load()) {
		t.Fatalf("List: %d rows, %v; want %d", len(all), err, len(keys)+int(n.Load()))
	}
}
