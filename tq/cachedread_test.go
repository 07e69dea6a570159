package tq_test

import (
	"context"
	"errors"
	"reflect"
	"sync/atomic"
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/memory"
	"github.com/tqgo/tqgo/codec"
	"github.com/tqgo/tqgo/tq"
)

// cachingMeta is a memory MetaStore that also hands out its rows as a
// client's copy would (backends.CachedLookup), counting the lookups that
// would be requests. stale, when set, is the copy LookupCached gives
// instead of the store's rows.
type cachingMeta struct {
	*memory.MetaStore
	lookups atomic.Int32
	stale   map[string]*backends.Row
}

type cachedToken struct {
	partition string
	keys      []string
	rows      []*backends.Row
}

func (m *cachingMeta) Lookup(ctx context.Context, partition string, keys []string) ([]*backends.Row, error) {
	m.lookups.Add(1)
	return m.MetaStore.Lookup(ctx, partition, keys)
}

func (m *cachingMeta) LookupCached(partition string, keys []string) ([]*backends.Row, any, bool) {
	rows, err := m.MetaStore.Lookup(context.Background(), partition, keys)
	if err != nil {
		return nil, nil, false
	}
	if m.stale != nil {
		for i, k := range keys {
			rows[i] = m.stale[k]
		}
	}
	return rows, cachedToken{partition, keys, rows}, true
}

// confirmingStore is a memory Store that confirms cached rows against the
// MetaStore in the read (backends.ConfirmingReader), counting its reads.
type confirmingStore struct {
	*memory.Store
	meta            *cachingMeta
	gets, confirmed atomic.Int32
}

func (s *confirmingStore) Get(ctx context.Context, keys []string) ([][]byte, error) {
	s.gets.Add(1)
	return s.Store.Get(ctx, keys)
}

func (s *confirmingStore) GetSplit(ctx context.Context, keys []string, dst []backends.SplitValue) error {
	s.gets.Add(1)
	return backends.GetSplitFromGet(ctx, s.Store, keys, dst)
}

func (s *confirmingStore) GetSplitConfirmed(ctx context.Context, _ backends.MetaStore, token any, keys []string, sizes []int, dst func() []backends.SplitValue) (bool, error) {
	s.confirmed.Add(1)
	tok := token.(cachedToken)
	cur, err := s.meta.MetaStore.Lookup(ctx, tok.partition, tok.keys)
	if err != nil {
		return false, err
	}
	d := dst()
	for i, size := range sizes {
		if len(d[i].Head)+len(d[i].Body) != size {
			return false, errors.New("test: a destination is not its size")
		}
	}
	if err := backends.GetSplitFromGet(ctx, s.Store, keys, d); err != nil {
		return false, err
	}
	return reflect.DeepEqual(cur, tok.rows), nil
}

func confirmingClient(t *testing.T) (*tq.Client, *confirmingStore, *cachingMeta) {
	meta := &cachingMeta{MetaStore: memory.NewMetaStore()}
	st := &confirmingStore{Store: memory.New(), meta: meta}
	t.Cleanup(func() { _ = meta.Close(); _ = st.Close() })
	return newClient(t, st, meta), st, meta
}

// counts is what one read cost: confirmed reads, other data reads, lookups.
func counts(st *confirmingStore, meta *cachingMeta) [3]int32 {
	return [3]int32{st.confirmed.Load(), st.gets.Load(), meta.lookups.Load()}
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

// A read of cached rows is one confirmed request, whichever fields it
// reads: stacked ones into their columns, jagged and values ones whole in
// the same request; no lookup, no other read.
func TestCachedReadIsOneRequest(t *testing.T) {
	ctx := t.Context()
	c, st, meta := confirmingClient(t)
	const n = 30
	keys := keysN("k", n)
	mustPut(t, c, "p", keys, cachedBatch(n), nil)
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
				t.Errorf("%s of %q: %d confirmed reads, %d other reads, %d lookups; want 1, 0, 0", name, fields, d[0], d[1], d[2])
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

// A stale copy, a corrupt cell read whole, or a field some cached row
// lacks: the read is answered as without the copy, from the rows looked
// up.
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

	meta.stale = map[string]*backends.Row{}
	for i, k := range keys {
		meta.stale[k] = old[i]
	}
	before := meta.lookups.Load()
	b := mustGet(t, c, "p", keys, "v", "j")
	if got, want := b["v"].Values(), tq.ValuesOf(keysN("new", n)).Values(); !reflect.DeepEqual(got, want) {
		t.Fatalf("v read from a stale copy: %v, want %v", got, want)
	}
	if meta.lookups.Load() == before {
		t.Fatal("a stale copy was not looked up again")
	}
	meta.stale = nil

	// v of k4 rewritten as a tensor under the key the metadata names.
	rows, err := meta.MetaStore.Lookup(ctx, "p", []string{"k4"})
	if err != nil {
		t.Fatal(err)
	}
	x, _ := codec.FromSlice([]int64{1})
	enc, _ := codec.Encode(x)
	if err := st.Store.Put(ctx, []string{backends.StorageKey(rows[0].Index, "v", rows[0].Fields["v"].Gen)}, [][]byte{enc}); err != nil {
		t.Fatal(err)
	}
	_, err = c.BatchGet(ctx, "p", keys, "v")
	var ke *tq.KeyError
	if !errors.As(err, &ke) || ke.Key != "k4" || ke.Field != "v" || !errors.Is(err, codec.ErrCorrupt) {
		t.Fatalf("read of a corrupt cell from the copy: %v, want ErrCorrupt naming k4/v", err)
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
		if err := st.Store.Put(ctx, []string{backends.StorageKey(rows[0].Index, "j", rows[0].Fields["j"].Gen)}, [][]byte{enc}); err != nil {
			t.Fatal(err)
		}
		before := meta.lookups.Load()
		_, err = c.BatchGet(ctx, "p", keys, "j")
		if !errors.As(err, &ke) || ke.Key != "k5" || ke.Field != "j" || !errors.Is(err, codec.ErrCorrupt) {
			t.Fatalf("read of a corrupt jagged cell (%v) from the copy: %v, want ErrCorrupt naming k5/j", v, err)
		}
		if meta.lookups.Load() == before {
			t.Fatal("a corrupt cell in the confirmed read was not read again after a lookup")
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
