package tq_test

import (
	"context"
	"errors"
	"reflect"
	"sync/atomic"
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/memory"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/codec"
	"github.com/tqgo/tqgo/tq"
)

// cachingMeta is a memory MetaStore over a memory Store as a
// metadata.Colocated: ReadRows plans with its copy of the rows (stale, when
// set, else the store's own) and confirms it against the store in the
// same call, planning again from a lookup when it was stale, as an engine
// with a client-side copy does. It counts its calls.
type cachingMeta struct {
	*memory.MetaStore
	data                            *memory.Store
	lookups, readRows, writeCommits atomic.Int32
	stale                           map[string]*metadata.Row
}

var _ metadata.Colocated = (*cachingMeta)(nil)

func (m *cachingMeta) Lookup(ctx context.Context, partition string, keys []string) ([]*metadata.Row, error) {
	m.lookups.Add(1)
	return m.MetaStore.Lookup(ctx, partition, keys)
}

func (m *cachingMeta) WriteCommit(ctx context.Context, partition string, cells []backends.Cell, updates []metadata.RowUpdate) (metadata.CommitResult, error) {
	m.writeCommits.Add(1)
	if err := m.data.Write(ctx, cells); err != nil {
		return metadata.CommitResult{}, err
	}
	return m.MetaStore.Commit(ctx, partition, updates)
}

func (m *cachingMeta) ReadRows(ctx context.Context, partition string, keys []string, plan func([]*metadata.Row) ([]backends.ReadCell, error)) ([]*metadata.Row, error) {
	m.readRows.Add(1)
	cur, err := m.MetaStore.Lookup(ctx, partition, keys)
	if err != nil {
		return nil, err
	}
	rows := cur
	if m.stale != nil {
		rows = make([]*metadata.Row, len(keys))
		for i, k := range keys {
			rows[i] = m.stale[k]
		}
	}
	for {
		cells, err := plan(rows)
		if err != nil {
			return nil, err
		}
		if err := m.data.Read(ctx, cells); err != nil {
			return nil, err
		}
		if reflect.DeepEqual(rows, cur) {
			return rows, nil
		}
		rows = cur // the copy was stale: plan again with the rows as they are
	}
}

// confirmingStore is the memory Store, counting the reads that did not go
// through ReadRows.
type confirmingStore struct {
	*memory.Store
	gets atomic.Int32
}

func (s *confirmingStore) Read(ctx context.Context, cells []backends.ReadCell) error {
	s.gets.Add(1)
	return s.Store.Read(ctx, cells)
}

func confirmingClient(t *testing.T) (*tq.Client, *confirmingStore, *cachingMeta) {
	st := &confirmingStore{Store: memory.New()}
	meta := &cachingMeta{MetaStore: memory.NewMetaStore(), data: st.Store}
	t.Cleanup(func() { _ = meta.Close(); _ = st.Close() })
	return newClient(t, st, meta), st, meta
}

// counts is what one read cost: ReadRows calls, other data reads, lookups.
func counts(st *confirmingStore, meta *cachingMeta) [3]int32 {
	return [3]int32{meta.readRows.Load(), st.gets.Load(), meta.lookups.Load()}
}

func cachedBatch(n int) tq.Batch {
	x := make([]float32, 2*n)
	j := make([][]int32, n)
	v := make([]string, n)
	for i := range n {
		x[2*i], x[2*i+1] = float32(i), -float32(i)
		j[i] = make([]int32, i%4+1)
		j[i][0] = int32(i)
		v[i] = keysN("v", n)[i]
	}
	return tq.Batch{"x": tq.Stacked(x, n, 2), "j": tq.JaggedOf(j), "v": tq.ValuesOf(v)}
}

// On a Colocated engine a read is one ReadRows call, whichever fields it
// reads: stacked ones into their columns, jagged and values ones whole in
// the same call; no lookup, no other read. A put is one WriteCommit.
func TestCachedReadIsOneRequest(t *testing.T) {
	ctx := t.Context()
	c, st, meta := confirmingClient(t)
	const n = 30
	keys := keysN("k", n)
	mustPut(t, c, "p", keys, cachedBatch(n), nil)
	if n := meta.writeCommits.Load(); n != 1 {
		t.Fatalf("a put of one chunk made %d WriteCommit calls, want 1", n)
	}
	m, err := c.List(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	want := cachedBatch(n)
	for _, fields := range [][]string{nil, {"j"}, {"v"}, {"j", "v"}, {"x"}, {"v", "x"}} {
		for name, get := range map[string]func() (tq.Batch, error){
			"BatchGet":       func() (tq.Batch, error) { return c.BatchGet(ctx, "p", keys, fields...) },
			"BatchGetByMeta": func() (tq.Batch, error) { return c.BatchGetByMeta(ctx, m, fields...) },
		} {
			before := counts(st, meta)
			b, err := get()
			if err != nil {
				t.Fatalf("%s of %q: %v", name, fields, err)
			}
			after := counts(st, meta)
			if d := [3]int32{after[0] - before[0], after[1] - before[1], after[2] - before[2]}; d != [3]int32{1, 0, 0} {
				t.Errorf("%s of %q: %d ReadRows, %d other reads, %d lookups; want 1, 0, 0", name, fields, d[0], d[1], d[2])
			}
			for _, f := range b.Fields() {
				if !reflect.DeepEqual(b[f].Values(), want[f].Values()) {
					t.Fatalf("%s of %q: field %s read back differs", name, fields, f)
				}
			}
			if len(fields) > 0 && len(b) != len(fields) || len(fields) == 0 && len(b) != 3 {
				t.Fatalf("%s of %q: fields %v", name, fields, b.Fields())
			}
		}
	}
}

// A stale copy is answered from the rows as they are; a corrupt cell, or
// a field some row lacks, fails the read naming the cell.
func TestCachedReadFallsBack(t *testing.T) {
	ctx := t.Context()
	c, st, meta := confirmingClient(t)
	const n = 10
	keys := keysN("k", n)
	mustPut(t, c, "p", keys, cachedBatch(n), nil)
	old, err := meta.MetaStore.Lookup(ctx, "p", keys)
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, c, "p", keys, tq.Batch{"v": tq.ValuesOf(keysN("new", n))}, nil)

	meta.stale = map[string]*metadata.Row{}
	for i, k := range keys {
		meta.stale[k] = old[i]
	}
	before := meta.readRows.Load()
	b := mustGet(t, c, "p", keys, "v", "j")
	if got, want := b["v"].Values(), tq.ValuesOf(keysN("new", n)).Values(); !reflect.DeepEqual(got, want) {
		t.Fatalf("v read from a stale copy: %v, want %v", got, want)
	}
	if meta.readRows.Load() != before+1 {
		t.Fatalf("a stale copy took %d ReadRows calls, want 1", meta.readRows.Load()-before)
	}
	meta.stale = nil

	// v of k4 rewritten as a tensor under the key the metadata names.
	rows, err := meta.MetaStore.Lookup(ctx, "p", []string{"k4"})
	if err != nil {
		t.Fatal(err)
	}
	x, _ := codec.FromSlice([]int64{1})
	enc, _ := codec.Encode(x)
	if err := putRaw(ctx, st.Store, []string{backends.StorageKey(rows[0].Index, "v", rows[0].Fields["v"].Gen)}, [][]byte{enc}); err != nil {
		t.Fatal(err)
	}
	_, err = c.BatchGet(ctx, "p", keys, "v")
	var ke *tq.KeyError
	if !errors.As(err, &ke) || ke.Key != "k4" || ke.Field != "v" || !errors.Is(err, codec.ErrCorrupt) {
		t.Fatalf("read of a corrupt cell: %v, want ErrCorrupt naming k4/v", err)
	}

	// j of k5 (int32 [2]) rewritten as a float32 [2] (a cell of the same
	// length), then as an int32 [1] (of another length).
	f2, _ := codec.FromSlice([]float32{1, 2})
	i1, _ := codec.FromSlice([]int32{1})
	for _, v := range []codec.Tensor{f2, i1} {
		rows, err := meta.MetaStore.Lookup(ctx, "p", []string{"k5"})
		if err != nil {
			t.Fatal(err)
		}
		enc, _ := codec.Encode(v)
		sameLength := len(enc) == len(mustEncodeTQ(t, codec.Tensor{DType: codec.Int32, Shape: []int64{2}, Data: make([]byte, 8)}))
		if sameLength != (v.DType == codec.Float32) {
			t.Fatalf("%v: not the cell length the case is about", v.DType)
		}
		if err := putRaw(ctx, st.Store, []string{backends.StorageKey(rows[0].Index, "j", rows[0].Fields["j"].Gen)}, [][]byte{enc}); err != nil {
			t.Fatal(err)
		}
		_, err = c.BatchGet(ctx, "p", keys, "j")
		if !errors.As(err, &ke) || ke.Key != "k5" || ke.Field != "j" || !errors.Is(err, codec.ErrCorrupt) {
			t.Fatalf("read of a corrupt jagged cell (%v): %v, want ErrCorrupt naming k5/j", v, err)
		}
	}

	mustPut(t, c, "p", keys[:1], tq.Batch{"r": tq.ValuesOf([]int64{1})}, nil)
	_, err = c.BatchGet(ctx, "p", keys)
	if !errors.As(err, &ke) || ke.Key != "k1" || ke.Field != "r" || !errors.Is(err, tq.ErrNotReady) {
		t.Fatalf("read of every field where a row lacks one: %v, want ErrNotReady naming k1/r", err)
	}
}

func mustEncodeTQ(t *testing.T, v any) []byte {
	t.Helper()
	b, err := codec.Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
