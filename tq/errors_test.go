package tq_test

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/memory"
	"github.com/tqgo/tqgo/codec"
	"github.com/tqgo/tqgo/tq"
)

// isKeyErr reports whether err matches sentinel and is a *tq.KeyError for
// key and field.
func isKeyErr(err, sentinel error, key, field string) bool {
	var ke *tq.KeyError
	return errors.Is(err, sentinel) && errors.As(err, &ke) && ke.Key == key && ke.Field == field
}

// TestPutValidation: every malformed BatchPut fails with ErrInvalid before
// anything is written: no backend call, no metadata Prepare.
func TestPutValidation(t *testing.T) {
	bad := codec.Tensor{DType: codec.Float32, Shape: []int64{3}, Data: make([]byte, 8)}
	x2 := tq.Stacked([]int64{1, 2}, 2)
	for _, tc := range []struct {
		name      string
		partition string
		keys      []string
		batch     tq.Batch
		tags      []tq.Tag
		also      error  // another error the result must match
		key       string // the key a *KeyError must name, if any
		field     string // and the field
		inMessage string // text the message must hold
	}{
		{name: "column longer than keys", keys: []string{"a"}, batch: tq.Batch{"x": x2}, inMessage: `field "x" has 2 rows for 1 keys`},
		{name: "column shorter than keys", keys: []string{"a", "b", "c"}, batch: tq.Batch{"x": x2}},
		{name: "second column mismatched", keys: []string{"a", "b"}, batch: tq.Batch{"x": x2, "y": tq.ValuesOf([]int{1})}},
		{name: "tags vs keys", keys: []string{"a", "b"}, batch: tq.Batch{"x": x2}, tags: []tq.Tag{{}}, inMessage: "1 tags for 2 keys"},
		{name: "tags only, wrong count", keys: []string{"a"}, tags: []tq.Tag{{}, {}}},
		{name: "duplicate keys", keys: []string{"a", "a"}, batch: tq.Batch{"x": x2}, inMessage: `"a" appears twice`},
		{name: "empty key", keys: []string{"a", ""}, batch: tq.Batch{"x": x2}},
		{name: "no keys", keys: nil, batch: tq.Batch{"x": x2}},
		{name: "nothing to write", keys: []string{"a"}, batch: tq.Batch{}},
		{name: "empty field", keys: []string{"a", "b"}, batch: tq.Batch{"": x2}},
		{name: "field with @", keys: []string{"a", "b"}, batch: tq.Batch{"a@b": x2}},
		{name: "field with #", keys: []string{"a", "b"}, batch: tq.Batch{"a#b": x2}},
		{name: "field with space", keys: []string{"a", "b"}, batch: tq.Batch{"a b": x2}},
		{name: "field with brace", keys: []string{"a", "b"}, batch: tq.Batch{"{a}": x2}},
		{name: "field too long", keys: []string{"a", "b"}, batch: tq.Batch{strings.Repeat("f", 256): x2}},
		{name: "bad field among good", keys: []string{"a", "b"}, batch: tq.Batch{"ok": x2, "not ok": x2}},
		{name: "empty partition", partition: "-", keys: []string{"a", "b"}, batch: tq.Batch{"x": x2}},
		{name: "partition with space", partition: "p q", keys: []string{"a", "b"}, batch: tq.Batch{"x": x2}},
		{name: "zero column", keys: []string{"a"}, batch: tq.Batch{"x": {}}, inMessage: "zero Column"},
		{name: "stacked wrong shape", keys: []string{"a", "b"}, batch: tq.Batch{"x": tq.Stacked([]int64{1, 2, 3}, 2, 2)}, also: codec.ErrShapeMismatch, inMessage: `field "x"`},
		{name: "stacked 0-d", keys: []string{"a"}, batch: tq.Batch{"x": tq.StackedTensor(codec.Scalar(int64(1)))}, also: codec.ErrShapeMismatch},
		{name: "stacked bad dtype", keys: []string{"a"}, batch: tq.Batch{"x": tq.StackedTensor(codec.Tensor{DType: 200, Shape: []int64{1}})}, also: codec.ErrUnknownDType},
		{name: "stacked negative dim", keys: []string{"a"}, batch: tq.Batch{"x": tq.StackedTensor(codec.Tensor{DType: codec.Int8, Shape: []int64{1, -1}})}, also: codec.ErrNegativeDim},
		{name: "jagged bad tensor", keys: []string{"a", "b"}, batch: tq.Batch{"x": tq.Jagged([]codec.Tensor{codec.Scalar(int8(1)), bad})}, also: codec.ErrShapeMismatch, key: "b", field: "x"},
		{name: "values bad tensor", keys: []string{"a", "b", "c"}, batch: tq.Batch{"x": tq.Stacked([]int64{1, 2, 3}, 3), "y": tq.Values([]any{1, 2, bad})}, also: codec.ErrShapeMismatch, key: "c", field: "y"},
		{name: "values bad tensor pointer", keys: []string{"a", "b"}, batch: tq.Batch{"y": tq.Values([]any{&bad, 2})}, also: codec.ErrShapeMismatch, key: "a", field: "y"},
		{name: "values nested bad tensor", keys: []string{"a", "b"}, batch: tq.Batch{"y": tq.Values([]any{1, map[string]any{"t": bad}})}, also: codec.ErrShapeMismatch, key: "b", field: "y"},
		{name: "values unsupported type", keys: []string{"a", "b"}, batch: tq.Batch{"x": x2, "z": tq.Values([]any{1, make(chan int)})}, also: codec.ErrUnsupportedType, key: "b", field: "z"},
		{name: "values map with non-string keys", keys: []string{"a"}, batch: tq.Batch{"z": tq.Values([]any{map[int]any{1: 1}})}, also: codec.ErrUnsupportedType, key: "a", field: "z"},
		{name: "values too deep", keys: []string{"a"}, batch: tq.Batch{"z": tq.Values([]any{deep(codec.MaxDepth + 2)})}, also: codec.ErrTooDeep, key: "a", field: "z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSpy(nil)
			ms := newMetaSpy()
			c := newClient(t, s.backend(true), ms)
			partition := tc.partition
			switch partition {
			case "":
				partition = "p"
			case "-":
				partition = ""
			}
			err := c.BatchPut(context.Background(), partition, tc.keys, tc.batch, tc.tags)
			if !errors.Is(err, tq.ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
			if tc.also != nil && !errors.Is(err, tc.also) {
				t.Fatalf("err = %v, want it to match %v too", err, tc.also)
			}
			if tc.key != "" && !isKeyErr(err, tq.ErrInvalid, tc.key, tc.field) {
				t.Fatalf("err = %v, want a *KeyError naming key %q field %q", err, tc.key, tc.field)
			}
			if tc.inMessage != "" && !strings.Contains(err.Error(), tc.inMessage) {
				t.Fatalf("err = %q, want it to say %q", err, tc.inMessage)
			}
			if n := s.totalCalls(); n != 0 || s.inner.Len() != 0 {
				t.Fatalf("%d backend calls, %d keys stored before the error", n, s.inner.Len())
			}
			if n := ms.prepares.Load() + ms.commits.Load(); n != 0 {
				t.Fatalf("%d metadata calls before the error", n)
			}
			if ps, _ := c.Partitions(context.Background()); len(ps) != 0 {
				t.Fatalf("partitions %v after a rejected put", ps)
			}
		})
	}
}

func deep(n int) any {
	var v any = int64(1)
	for range n {
		v = []any{v}
	}
	return v
}

func TestPutRowValidation(t *testing.T) {
	ctx := context.Background()
	s := newSpy(nil)
	c := newClient(t, s, nil)
	bad := codec.Tensor{DType: codec.Int64, Shape: []int64{2}, Data: make([]byte, 3)}
	err := c.Put(ctx, "p", "k", map[string]any{"ok": int64(1), "t": bad}, nil)
	if !isKeyErr(err, tq.ErrInvalid, "k", "t") || !errors.Is(err, codec.ErrShapeMismatch) {
		t.Fatalf("Put of a bad tensor: %v, want ErrInvalid naming k and t", err)
	}
	if err := c.Put(ctx, "p", "k", nil, nil); !errors.Is(err, tq.ErrInvalid) {
		t.Fatalf("Put of nothing: %v", err)
	}
	if err := c.Put(ctx, "p", "", map[string]any{"x": 1}, nil); !errors.Is(err, tq.ErrInvalid) {
		t.Fatalf("Put of an empty key: %v", err)
	}
	if s.totalCalls() != 0 {
		t.Fatalf("%d backend calls", s.totalCalls())
	}
}

func TestGetErrors(t *testing.T) {
	ctx := context.Background()
	s := newSpy(nil)
	c := newClient(t, s, nil)
	mustPut(t, c, "p", []string{"a", "b"}, tq.Batch{"x": tq.Stacked([]int64{1, 2}, 2)}, nil)
	mustPut(t, c, "p", []string{"a"}, tq.Batch{"y": tq.ValuesOf([]int{1})}, nil)
	s.resetCalls()

	_, err := c.BatchGet(ctx, "p", []string{"a", "b"}, "x", "y")
	if !isKeyErr(err, tq.ErrNotReady, "b", "y") {
		t.Fatalf("field b lacks: %v, want ErrNotReady naming b and y", err)
	}
	if msg := err.Error(); !strings.Contains(msg, `"b"`) || !strings.Contains(msg, `"y"`) {
		t.Fatalf("message %q does not name the key and field", msg)
	}
	// No fields named: the union of the rows' fields, which b lacks one of.
	if _, err := c.BatchGet(ctx, "p", []string{"a", "b"}); !isKeyErr(err, tq.ErrNotReady, "b", "y") {
		t.Fatalf("union of fields: %v", err)
	}
	if _, err := c.BatchGet(ctx, "p", []string{"a", "zz", "b"}); !isKeyErr(err, tq.ErrNotFound, "zz", "") {
		t.Fatalf("unknown key: %v", err)
	}
	if _, err := c.BatchGet(ctx, "nowhere", []string{"a"}); !isKeyErr(err, tq.ErrNotFound, "a", "") {
		t.Fatalf("unknown partition: %v", err)
	}
	if _, err := c.Lookup(ctx, "p", []string{"zz"}); !isKeyErr(err, tq.ErrNotFound, "zz", "") {
		t.Fatalf("Lookup of an unknown key: %v", err)
	}
	for name, f := range map[string]func() error{
		"duplicate keys": func() error { _, err := c.BatchGet(ctx, "p", []string{"a", "a"}); return err },
		"empty key":      func() error { _, err := c.BatchGet(ctx, "p", []string{""}); return err },
		"empty field":    func() error { _, err := c.BatchGet(ctx, "p", []string{"a"}, ""); return err },
		"bad field":      func() error { _, err := c.BatchGet(ctx, "p", []string{"a"}, "x@0"); return err },
		"field twice":    func() error { _, err := c.BatchGet(ctx, "p", []string{"a"}, "x", "x"); return err },
		"bad partition":  func() error { _, err := c.BatchGet(ctx, "", []string{"a"}); return err },
		"list bad":       func() error { _, err := c.List(ctx, "a b"); return err },
		"lookup bad":     func() error { _, err := c.Lookup(ctx, "", []string{"a"}); return err },
		"lookup dup":     func() error { _, err := c.Lookup(ctx, "p", []string{"a", "a"}); return err },
		"clear bad":      func() error { return c.Clear(ctx, "", []string{"a"}) },
		"clear dup":      func() error { return c.Clear(ctx, "p", []string{"a", "a"}) },
		"clearpart bad":  func() error { return c.ClearPartition(ctx, "a#b") },
		"nil meta":       func() error { _, err := c.BatchGetByMeta(ctx, nil); return err },
		"meta partition": func() error {
			_, err := c.BatchGetByMeta(ctx, &tq.BatchMeta{Rows: []tq.RowInfo{{Key: "a"}}})
			return err
		},
		"meta duplicates": func() error {
			_, err := c.BatchGetByMeta(ctx, &tq.BatchMeta{Partition: "p", Rows: []tq.RowInfo{{Key: "a"}, {Key: "a"}}})
			return err
		},
	} {
		if err := f(); !errors.Is(err, tq.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if n := s.totalCalls(); n != 0 {
		t.Fatalf("%d backend calls for failed reads", n)
	}
	// Nothing was cleared by the rejected clears.
	if s.inner.Len() != 3 {
		t.Fatalf("store %d cells, want 3", s.inner.Len())
	}
}

// TestGetCorruptCell: bytes that do not decode give an error naming the
// key and field, never a panic or a wrong value.
func TestGetCorruptCell(t *testing.T) {
	st := memory.New()
	c := newClient(t, st, nil)
	mustPut(t, c, "p", []string{"a", "b"}, tq.Batch{"x": tq.Stacked([]int64{1, 2}, 2)}, nil)
	if err := putRaw(context.Background(), st, []string{backends.StorageKey(1, "x", 0)}, [][]byte{{1, 2, 3}}); err != nil {
		t.Fatal(err)
	}
	_, err := c.BatchGet(context.Background(), "p", []string{"a", "b"})
	var ke *tq.KeyError
	if !errors.Is(err, codec.ErrCorrupt) || !errors.As(err, &ke) || ke.Key != "b" || ke.Field != "x" {
		t.Fatalf("corrupt cell: %v", err)
	}
}

// TestBackendErrorsPropagate: a failing backend read or clear is returned
// as is, matching the backend's error.
func TestBackendErrorsPropagate(t *testing.T) {
	ctx := context.Background()
	s := newSpy(func(_ context.Context, op string, _ int, keys []string) (int, error) {
		if op == "get" || op == "delete" {
			return 0, errInjected
		}
		return len(keys), nil
	})
	c := newClient(t, s, nil)
	mustPut(t, c, "p", []string{"a"}, tq.Batch{"x": tq.Stacked([]int64{1}, 1)}, nil)
	if _, err := c.BatchGet(ctx, "p", []string{"a"}); !errors.Is(err, errInjected) {
		t.Fatalf("BatchGet: %v", err)
	}
	// Clear removes the row from the metadata even when deleting its bytes
	// fails: it applied, so it returns nil (the cell is garbage for
	// Reclaim).
	if err := c.Clear(ctx, "p", []string{"a"}); err != nil {
		t.Fatalf("Clear whose cell delete failed: %v, want nil (the rows are gone)", err)
	}
	if _, err := c.Lookup(ctx, "p", []string{"a"}); !errors.Is(err, tq.ErrNotFound) {
		t.Fatalf("Lookup after Clear: %v", err)
	}
}

func TestClosed(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	c, err := tq.New(local(st))
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, c, "p", []string{"a"}, tq.Batch{"x": tq.Stacked([]int64{1}, 1)}, nil)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	m := &tq.BatchMeta{Partition: "p", Rows: []tq.RowInfo{{Key: "a"}}}
	for name, f := range map[string]func() error{
		"Put":            func() error { return c.Put(ctx, "p", "a", map[string]any{"x": 1}, nil) },
		"BatchPut":       func() error { return c.BatchPut(ctx, "p", []string{"a"}, nil, []tq.Tag{{}}) },
		"BatchGet":       func() error { _, err := c.BatchGet(ctx, "p", []string{"a"}); return err },
		"BatchGetByMeta": func() error { _, err := c.BatchGetByMeta(ctx, m); return err },
		"List":           func() error { _, err := c.List(ctx, "p"); return err },
		"Lookup":         func() error { _, err := c.Lookup(ctx, "p", []string{"a"}); return err },
		"Partitions":     func() error { _, err := c.Partitions(ctx); return err },
		"Clear":          func() error { return c.Clear(ctx, "p", []string{"a"}) },
		"ClearPartition": func() error { return c.ClearPartition(ctx, "p") },
	} {
		if err := f(); !errors.Is(err, tq.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
	// A client from New does not close what the caller built.
	if got, err := getRaw(ctx, st, []string{"0@x"}); err != nil || got[0] == nil {
		t.Fatalf("store after client Close: %v %v", got, err)
	}
}

func TestOpenClose(t *testing.T) {
	ctx := context.Background()
	for _, url := range []string{"", "memory://"} {
		c, err := tq.Open(ctx, url)
		if err != nil {
			t.Fatalf("Open(%q): %v", url, err)
		}
		mustPut(t, c, "p", []string{"a"}, tq.Batch{"x": tq.Stacked([]int64{1}, 1)}, nil)
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	_, err := tq.Open(ctx, "nosuch://user:hunter2@host/db")
	if !errors.Is(err, backends.ErrUnknownScheme) {
		t.Fatalf("unknown scheme: %v", err)
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("error shows the password: %v", err)
	}
	if !strings.Contains(err.Error(), "forgotten import") {
		t.Fatalf("error does not hint at the import: %v", err)
	}
}

func TestOptionValidation(t *testing.T) {
	ctx := context.Background()
	for name, opt := range map[string]tq.Option{
		"KeysLimit 0":         tq.WithKeysLimit(0),
		"KeysLimit -1":        tq.WithKeysLimit(-1),
		"IODepth 0":           tq.WithIODepth(0),
		"DSMaxWorkers 0":      tq.WithDSMaxWorkers(0),
		"PackThreshold 0":     tq.WithPackThreshold(0),
		"PoolMinBatchBytes 0": tq.WithPoolMinBatchBytes(0),
		"nil logger":          tq.WithLogger(nil),
	} {
		if c, err := tq.Open(ctx, "", opt); !errors.Is(err, tq.ErrInvalid) || c != nil {
			t.Errorf("Open with %s: %v, want ErrInvalid", name, err)
		}
		if c, err := tq.New(local(memory.New()), tq.WithKeysLimit(5), opt); !errors.Is(err, tq.ErrInvalid) || c != nil {
			t.Errorf("New with %s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := tq.New(backends.Engine{}); !errors.Is(err, tq.ErrInvalid) {
		t.Errorf("New of an engine with no Store: %v", err)
	}
	// A nil option is skipped; valid ones are accepted.
	c, err := tq.Open(ctx, "", nil, tq.WithKeysLimit(1), tq.WithIODepth(1), tq.WithDSMaxWorkers(1),
		tq.WithPackThreshold(1), tq.WithPoolMinBatchBytes(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	mustPut(t, c, "p", []string{"a", "b"}, tq.Batch{"x": tq.Stacked([]int64{1, 2}, 2)}, nil)
}

func TestCancelledContext(t *testing.T) {
	s := newSpy(nil)
	ms := newMetaSpy()
	c := newClient(t, s.backend(true), ms)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := c.BatchPut(ctx, "p", []string{"a"}, tq.Batch{"x": tq.Stacked([]int64{1}, 1)}, nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("BatchPut: %v", err)
	}
	if _, err := c.BatchGet(ctx, "p", []string{"a"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("BatchGet: %v", err)
	}
	if s.totalCalls() != 0 || ms.prepares.Load() != 0 {
		t.Fatalf("%d backend calls, %d prepares with a cancelled context", s.totalCalls(), ms.prepares.Load())
	}
}

// An engine with no MetaStore is refused unless it is Local (processes
// sharing its data would hand out the same global indexes), by New and by
// Open, as ErrInvalid and backends.ErrInvalid; a Local one gets an
// in-process metadata store and works.
func TestEngineWithoutMeta(t *testing.T) {
	ctx := context.Background()
	c, err := tq.New(backends.Engine{Data: memory.New()})
	if !errors.Is(err, tq.ErrInvalid) || !errors.Is(err, backends.ErrInvalid) || c != nil {
		t.Fatalf("New of a shared engine with no Meta: %v, want ErrInvalid and backends.ErrInvalid", err)
	}
	backends.Register("tqtestnometa", func(context.Context, *url.URL) (backends.Engine, error) {
		return backends.Engine{Data: memory.New()}, nil
	})
	c, err = tq.Open(ctx, "tqtestnometa://x")
	if !errors.Is(err, tq.ErrInvalid) || !errors.Is(err, backends.ErrInvalid) || c != nil {
		t.Fatalf("Open of a shared engine with no Meta: %v, want ErrInvalid and backends.ErrInvalid", err)
	}
	backends.Register("tqtestlocal", func(context.Context, *url.URL) (backends.Engine, error) {
		return backends.Engine{Data: memory.New(), Local: true}, nil
	})
	opened, err := tq.Open(ctx, "tqtestlocal://x")
	if err != nil {
		t.Fatalf("Open of a Local engine with no Meta: %v", err)
	}
	defer opened.Close()
	built, err := tq.New(backends.Engine{Data: memory.New(), Local: true})
	if err != nil {
		t.Fatalf("New of a Local engine with no Meta: %v", err)
	}
	defer built.Close()
	for _, c := range []*tq.Client{opened, built} {
		mustPut(t, c, "p", []string{"a"}, tq.Batch{"x": tq.Stacked([]int64{7}, 1)}, nil)
		if got := flat[int64](t, mustGet(t, c, "p", []string{"a"})["x"]); !slices.Equal(got, []int64{7}) {
			t.Fatalf("read back %v", got)
		}
	}
}

// notMeta is a Meta that is no metadata.MetaStore; it records its Close.
type notMeta struct{ closed *bool }

func (m notMeta) Close() error { *m.closed = true; return nil }

// An engine whose Meta is no metadata.MetaStore is refused by New and by
// Open, as ErrInvalid and backends.ErrInvalid, and Open closes it.
func TestEngineMetaNotMetaStore(t *testing.T) {
	var closed bool
	c, err := tq.New(backends.Engine{Data: memory.New(), Meta: notMeta{&closed}})
	if !errors.Is(err, tq.ErrInvalid) || !errors.Is(err, backends.ErrInvalid) || c != nil {
		t.Fatalf("New of an engine whose Meta is no MetaStore: %v, want ErrInvalid and backends.ErrInvalid", err)
	}
	if closed {
		t.Fatal("New closed the caller's engine")
	}
	backends.Register("tqtestnotmeta", func(context.Context, *url.URL) (backends.Engine, error) {
		return backends.Engine{Data: memory.New(), Meta: notMeta{&closed}}, nil
	})
	c, err = tq.Open(context.Background(), "tqtestnotmeta://x")
	if !errors.Is(err, tq.ErrInvalid) || !errors.Is(err, backends.ErrInvalid) || c != nil {
		t.Fatalf("Open of an engine whose Meta is no MetaStore: %v, want ErrInvalid and backends.ErrInvalid", err)
	}
	if !strings.Contains(err.Error(), "MetaStore") {
		t.Errorf("Open's error does not say what is wrong: %v", err)
	}
	if !closed {
		t.Error("Open did not close the engine it refused")
	}
}
