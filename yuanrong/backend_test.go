package yuanrong_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/yuanrong"
)

func newBackend(t *testing.T, ds yuanrong.DataSystem, opts ...yuanrong.Option) *yuanrong.Backend {
	t.Helper()
	b, err := yuanrong.NewBackend(ds, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// stage stages a cell per key, each filled with its key's bytes.
func stage(t *testing.T, b *yuanrong.Backend, keys []string) []backends.Cell {
	t.Helper()
	cells := make([]backends.Cell, len(keys))
	sizes := make([]int, len(keys))
	for i, k := range keys {
		cells[i].Key, sizes[i] = k, len(k)
	}
	if err := b.Stage(t.Context(), cells, sizes); err != nil {
		t.Fatal(err)
	}
	for i, c := range cells {
		if c.Staged == nil || len(c.Body) != sizes[i] {
			t.Fatalf("cell %d staged as %v with %d bytes", i, c.Staged, len(c.Body))
		}
		copy(c.Body, c.Key)
	}
	return cells
}

// A Write of staged cells whose publish fails in its 2nd of 3 rounds takes
// back what it published: nothing is visible, no buffer stays created, no
// tag is reported, and the cells cannot be written again.
func TestBackendStagedRollback(t *testing.T) {
	ctx := t.Context()
	local := yuanrong.NewLocal()
	ds := &countingDS{DataSystem: local, failPublish: 2}
	b := newBackend(t, ds, yuanrong.WithPutKeysLimit(4))
	cells := stage(t, b, keysN("f", 10))
	if err := b.Write(ctx, cells); !errors.Is(err, errPublish) {
		t.Fatalf("write: %v, want the injected fault", err)
	}
	for _, c := range cells {
		if c.Tag != "" {
			t.Fatalf("cell %q tagged %q after a failed write", c.Key, c.Tag)
		}
	}
	if _, publishes, _, _ := ds.calls(); !slices.Equal(publishes, []int{4, 4}) {
		t.Fatalf("publishes %v, want the 2nd round to fail and the 3rd never to run", publishes)
	}
	if local.Len() != 0 || local.Pending() != 0 {
		t.Fatalf("datasystem holds %d keys and %d created buffers after rollback", local.Len(), local.Pending())
	}
	if err := b.Write(ctx, cells); !errors.Is(err, yuanrong.ErrInvalid) {
		t.Fatalf("write again: %v, want ErrInvalid", err)
	}
	if creates, publishes, _, deletes := ds.calls(); creates != nil || publishes != nil || deletes != nil {
		t.Fatalf("the refused write reached the datasystem: creates %v publishes %v deletes %v", creates, publishes, deletes)
	}
	b.Unstage(cells)
	if local.Pending() != 0 {
		t.Fatalf("%d created buffers after Unstage", local.Pending())
	}
}

// A Write on a context that has ended changes nothing: old values stay,
// and the staged cells stay the caller's to Unstage, which releases them.
func TestBackendStagedCanceledWrite(t *testing.T) {
	local := yuanrong.NewLocal()
	b := newBackend(t, local, yuanrong.WithPutKeysLimit(4))
	c := newClient(t, local)
	if _, err := c.Put(t.Context(), []string{"9@f"}, []any{"old"}); err != nil {
		t.Fatal(err)
	}
	cells := stage(t, b, keysN("f", 10))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := b.Write(ctx, cells); !errors.Is(err, context.Canceled) {
		t.Fatalf("write on a canceled context: %v, want context.Canceled", err)
	}
	if local.Len() != 1 || local.Pending() != 10 {
		t.Fatalf("datasystem holds %d keys and %d created buffers, want the old key and the 10 staged", local.Len(), local.Pending())
	}
	if got := mget(t, local, "9@f"); got[0] == nil {
		t.Error("the old value of a key of the canceled write is gone")
	}
	b.Unstage(cells)
	b.Unstage(cells)
	if local.Pending() != 0 {
		t.Fatalf("%d created buffers after Unstage", local.Pending())
	}
}

// One Write publishes staged cells in place (the datasystem holds the very
// memory Stage handed out) and copies cells of caller memory, Head then
// Body, without keeping them; every cell comes back tagged TagKV, and Read
// fills destinations of the value's length and aliases the datasystem's
// memory otherwise.
func TestBackendWriteStagedAndCopied(t *testing.T) {
	ctx := t.Context()
	local := yuanrong.NewLocal()
	b := newBackend(t, local, yuanrong.WithPutKeysLimit(2))
	staged := stage(t, b, []string{"0@s", "1@s"})
	head, body := []byte("he"), []byte("llo")
	cells := []backends.Cell{
		staged[0],
		{Key: "0@c", Head: head, Body: body},
		staged[1],
		{Key: "1@c", Body: []byte("body only")},
		{Key: "2@c"}, // empty
	}
	if err := b.Write(ctx, cells); err != nil {
		t.Fatal(err)
	}
	for _, c := range cells {
		if c.Tag != yuanrong.TagKV {
			t.Errorf("cell %q tagged %q, want %q", c.Key, c.Tag, yuanrong.TagKV)
		}
	}
	copy(head, "XX") // Write must not have kept the caller's memory
	copy(body, "XXX")
	got := mget(t, local, "0@s", "1@s")
	for i, v := range got {
		if !bytes.Equal(v, staged[i].Body) || &v[0] != &staged[i].Body[0] {
			t.Errorf("staged cell %d published as %q, not in place", i, v)
		}
	}
	if local.Pending() != 0 {
		t.Errorf("%d created buffers after a write", local.Pending())
	}
	b.Unstage(cells) // published: ignored
	if local.Len() != 5 || local.Pending() != 0 {
		t.Fatalf("Unstage after Write: %d keys, %d created buffers", local.Len(), local.Pending())
	}

	rc := []backends.ReadCell{
		{Key: "0@c", Tag: yuanrong.TagKV, Head: make([]byte, 1), Body: make([]byte, 4)},
		{Key: "0@s", Tag: yuanrong.TagKV},
		{Key: "1@c", Tag: "", Body: make([]byte, 2)}, // another length
		{Key: "2@c", Tag: yuanrong.TagKV},
		{Key: "missing", Tag: yuanrong.TagKV},
	}
	if err := b.Read(ctx, rc); err != nil {
		t.Fatal(err)
	}
	if !rc[0].Found || string(rc[0].Head)+string(rc[0].Body) != "hello" || rc[0].Value != nil {
		t.Errorf("read into a destination: %+v", rc[0])
	}
	if !rc[1].Found || &rc[1].Value[0] != &staged[0].Body[0] {
		t.Errorf("read without a destination copied or missed: %+v", rc[1])
	}
	if !rc[2].Found || string(rc[2].Value) != "body only" {
		t.Errorf("read into a destination of another length: %+v", rc[2])
	}
	if !rc[3].Found || rc[3].Value == nil || len(rc[3].Value) != 0 {
		t.Errorf("read of an empty value: %+v", rc[3])
	}
	if rc[4].Found {
		t.Errorf("a missing key was found: %+v", rc[4])
	}
	if err := b.Delete(ctx, cells); err != nil {
		t.Fatal(err)
	}
	if local.Len() != 0 {
		t.Fatalf("%d keys after Delete", local.Len())
	}
}

// Stage, Write, Read and Delete check everything before the first
// datasystem call.
func TestBackendValidates(t *testing.T) {
	ctx := t.Context()
	ds := &countingDS{DataSystem: yuanrong.NewLocal()}
	b := newBackend(t, ds)
	other := newBackend(t, yuanrong.NewLocal())
	foreign := stage(t, other, []string{"x"})
	defer other.Unstage(foreign)
	cellsOf := func(keys ...string) []backends.Cell {
		out := make([]backends.Cell, len(keys))
		for i, k := range keys {
			out[i].Key = k
		}
		return out
	}
	headed := slices.Clone(foreign)
	headed[0].Head = []byte("h")
	mine := stage(t, b, []string{"m"})
	defer b.Unstage(mine)
	cut := slices.Clone(mine)
	cut[0].Body = cut[0].Body[:0]
	_, _, _, _ = ds.calls() // forget the staging
	for name, call := range map[string]func() error{
		"stage negative size":  func() error { return b.Stage(ctx, cellsOf("a", "b"), []int{1, -1}) },
		"stage duplicate key":  func() error { return b.Stage(ctx, cellsOf("a", "a"), []int{1, 1}) },
		"stage mismatched len": func() error { return b.Stage(ctx, cellsOf("a"), []int{1, 1}) },
		"stage empty key":      func() error { return b.Stage(ctx, cellsOf(""), []int{1}) },
		"write duplicate key":  func() error { return b.Write(ctx, cellsOf("a", "a")) },
		"write long key":       func() error { return b.Write(ctx, cellsOf(string(make([]byte, 256)))) },
		"write foreign staged": func() error { return b.Write(ctx, foreign) },
		"write staged headed":  func() error { return b.Write(ctx, headed) },
		"write staged cut":     func() error { return b.Write(ctx, cut) },
		"read unknown tag": func() error {
			return b.Read(ctx, []backends.ReadCell{{Key: "a"}, {Key: "b", Tag: "npu"}})
		},
		"delete unknown tag": func() error { return b.Delete(ctx, []backends.Cell{{Key: "a"}, {Key: "b", Tag: "npu"}}) },
	} {
		err := call()
		if !errors.Is(err, backends.ErrInvalid) && !errors.Is(err, yuanrong.ErrUnknownStrategy) {
			t.Errorf("%s: %v, want ErrInvalid or ErrUnknownStrategy", name, err)
		}
	}
	if creates, publishes, gets, deletes := ds.calls(); creates != nil || publishes != nil || gets != nil || deletes != nil {
		t.Fatalf("the datasystem was called: creates %v publishes %v gets %v deletes %v", creates, publishes, gets, deletes)
	}
	var ke *yuanrong.KeyError
	if err := b.Read(ctx, []backends.ReadCell{{Key: "b", Tag: "npu"}}); !errors.As(err, &ke) || ke.Key != "b" {
		t.Errorf("unknown tag: %v, want a *KeyError naming the key", err)
	}
}

// The Backend reports one round trip per datasystem call it waits on.
func TestBackendCountsRoundTrips(t *testing.T) {
	ds := &countingDS{DataSystem: yuanrong.NewLocal()}
	b := newBackend(t, ds, yuanrong.WithPutKeysLimit(4), yuanrong.WithGetClearKeysLimit(3))
	var rt backends.RoundTrips
	ctx := rt.Attach(t.Context())
	keys := keysN("f", 10)
	cells := make([]backends.Cell, len(keys))
	reads := make([]backends.ReadCell, len(keys))
	for i, k := range keys {
		cells[i] = backends.Cell{Key: k, Body: []byte(k)}
		reads[i].Key = k
	}
	if err := b.Write(ctx, cells); err != nil {
		t.Fatal(err)
	}
	if err := b.Read(ctx, reads); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(ctx, cells); err != nil {
		t.Fatal(err)
	}
	creates, publishes, gets, deletes := ds.calls()
	calls := len(creates) + len(publishes) + len(gets) + len(deletes)
	if calls == 0 || rt.Load() != int64(calls) {
		t.Fatalf("%d round trips counted for %d datasystem calls", rt.Load(), calls)
	}
}

// After Close every call fails with ErrClosed; cells staged before can
// still be unstaged.
func TestBackendClosed(t *testing.T) {
	ctx := t.Context()
	local := yuanrong.NewLocal()
	b, err := yuanrong.NewBackend(local)
	if err != nil {
		t.Fatal(err)
	}
	cells := stage(t, b, []string{"a"})
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"Stage":  b.Stage(ctx, []backends.Cell{{Key: "b"}}, []int{1}),
		"Write":  b.Write(ctx, cells),
		"Read":   b.Read(ctx, []backends.ReadCell{{Key: "a"}}),
		"Delete": b.Delete(ctx, cells),
	} {
		if !errors.Is(err, backends.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
	b.Unstage(cells)
	if local.Pending() != 0 {
		t.Fatalf("%d created buffers after Unstage", local.Pending())
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}
