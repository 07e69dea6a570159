package yuanrong_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/memory"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/tq"
	"github.com/tqgo/tqgo/tq/tqtest"
	"github.com/tqgo/tqgo/yuanrong"
)

// recordingBackend records the tags tq hands back to Read and Delete.
// Embedding keeps every other ability (Stage, Write, Unstage).
type recordingBackend struct {
	*yuanrong.Backend

	mu      sync.Mutex // guards the fields below
	staged  int
	getTags []string
	delTags []string
}

func (r *recordingBackend) Stage(ctx context.Context, cells []backends.Cell, sizes []int) error {
	r.mu.Lock()
	r.staged += len(cells)
	r.mu.Unlock()
	return r.Backend.Stage(ctx, cells, sizes)
}

func (r *recordingBackend) Read(ctx context.Context, cells []backends.ReadCell) error {
	r.mu.Lock()
	for _, c := range cells {
		r.getTags = append(r.getTags, c.Tag)
	}
	r.mu.Unlock()
	return r.Backend.Read(ctx, cells)
}

func (r *recordingBackend) Delete(ctx context.Context, cells []backends.Cell) error {
	r.mu.Lock()
	for _, c := range cells {
		r.delTags = append(r.delTags, c.Tag)
	}
	r.mu.Unlock()
	return r.Backend.Delete(ctx, cells)
}

func (r *recordingBackend) tags() (get, del []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	get, del = r.getTags, r.delTags
	r.getTags, r.delTags = nil, nil
	return
}

// newTQ opens a tq client over data and meta; a nil meta makes the engine
// Local (tq keeps the metadata in process), as every datasystem of these
// tests is in process.
func newTQ(t *testing.T, data backends.Store, meta metadata.MetaStore, opts ...tq.Option) *tq.Client {
	t.Helper()
	c, err := tq.New(backends.Engine{Data: data, Meta: meta, Local: meta == nil}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestTQOpen(t *testing.T) {
	ctx := t.Context()
	c, err := tq.Open(ctx, "yuanrong://?put_keys_limit=2&get_clear_keys_limit=3")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	keys := []string{"a", "b", "c", "d", "e"}
	err = c.BatchPut(ctx, "train", keys, tq.Batch{
		"input_ids": tq.Stacked([]int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 5, 2),
		"responses": tq.JaggedOf([][]int32{{1}, {2, 3}, {4}, {5, 6, 7}, {}}),
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.BatchGet(ctx, "train", []string{"e", "a"})
	if err != nil {
		t.Fatal(err)
	}
	ids, _ := tq.As[int64](b["input_ids"])
	rows, _ := tq.RowsAs[int32](b["responses"])
	if !slices.Equal(ids, []int64{9, 10, 1, 2}) || len(rows) != 2 || len(rows[0]) != 0 || !slices.Equal(rows[1], []int32{1}) {
		t.Fatalf("input_ids %v responses %v", ids, rows)
	}
	if err := c.Clear(ctx, "train", keys); err != nil {
		t.Fatal(err)
	}
	if m, err := c.List(ctx, "train"); err != nil || len(m.Rows) != 0 {
		t.Fatalf("after clear: %v %v", m, err)
	}
}

func TestTQOpenRejects(t *testing.T) {
	ctx := t.Context()
	_, err := tq.Open(ctx, "yuanrong://10.0.0.1:31501")
	if !errors.Is(err, yuanrong.ErrNoSDK) || !errors.Is(err, backends.ErrInvalid) {
		t.Errorf("a datasystem address: %v, want ErrNoSDK and ErrInvalid", err)
	}
	for _, u := range []string{"yuanrong://?put_keys_limit=0", "yuanrong://?put_keys_limit=x", "yuanrong://?workers=3"} {
		if _, err := tq.Open(ctx, u); !errors.Is(err, backends.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", u, err)
		}
	}
}

// tq packs values into buffers the Backend stages. The strategy tag Write
// reports lands in tq's metadata (FieldInfo.BackendTag) and comes back on
// get and clear.
func TestTQStrategyTagsRoundTrip(t *testing.T) {
	ctx := t.Context()
	local := yuanrong.NewLocal()
	rec := &recordingBackend{Backend: newBackend(t, local)}
	meta := memory.NewMetaStore()
	c := newTQ(t, rec, meta)
	keys := []string{"s0", "s1", "s2"}
	err := c.BatchPut(ctx, "p", keys, tq.Batch{
		"prompts": tq.Stacked([]int64{1, 2, 3}, 3),
		"uid":     tq.ValuesOf([]string{"x", "y", "z"}),
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := meta.Lookup(ctx, "p", keys)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		for f, fi := range r.Fields {
			if fi.BackendTag != yuanrong.TagKV {
				t.Errorf("row %q field %q: BackendTag %q, want %q", r.Key, f, fi.BackendTag, yuanrong.TagKV)
			}
		}
	}
	rec.mu.Lock()
	staged := rec.staged
	rec.mu.Unlock()
	if staged == 0 {
		t.Error("tq staged nothing: its packed values did not go straight into the datasystem's buffers")
	}
	if local.Pending() != 0 {
		t.Errorf("%d created buffers left after the put", local.Pending())
	}
	if _, err := c.BatchGet(ctx, "p", keys); err != nil {
		t.Fatal(err)
	}
	if err := c.Clear(ctx, "p", keys); err != nil {
		t.Fatal(err)
	}
	get, del := rec.tags()
	want := []string{yuanrong.TagKV, yuanrong.TagKV, yuanrong.TagKV, yuanrong.TagKV, yuanrong.TagKV, yuanrong.TagKV}
	if !slices.Equal(get, want) || !slices.Equal(del, want) {
		t.Fatalf("tags handed back: get %q delete %q, want %q each", get, del, want)
	}
	if local.Len() != 0 {
		t.Fatalf("%d keys left after clear", local.Len())
	}
}

// A cell whose metadata names a strategy this build lacks fails get and
// clear with ErrUnknownStrategy.
func TestTQUnknownStrategy(t *testing.T) {
	ctx := t.Context()
	meta := memory.NewMetaStore()
	c := newTQ(t, newBackend(t, yuanrong.NewLocal()), meta)
	if err := c.BatchPut(ctx, "p", []string{"k"}, tq.Batch{"f": tq.ValuesOf([]int64{7})}, nil); err != nil {
		t.Fatal(err)
	}
	// Rewrite the metadata as a process with an NPU strategy would have.
	res, err := meta.Prepare(ctx, "p", []string{"k"}, []string{"f"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = meta.Commit(ctx, "p", []metadata.RowUpdate{{Key: "k", Index: res[0].Index,
		Fields: map[string]metadata.FieldInfo{"f": {Gen: res[0].Gens["f"], BackendTag: "npu"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.BatchGet(ctx, "p", []string{"k"}); !errors.Is(err, yuanrong.ErrUnknownStrategy) {
		t.Errorf("get: %v, want ErrUnknownStrategy", err)
	}
	// The clear applies (the row is gone); the cell it cannot delete is
	// garbage, and Reclaim reports the strategy it does not know.
	if err := c.Clear(ctx, "p", []string{"k"}); err != nil {
		t.Errorf("clear: %v, want nil (the row is gone)", err)
	}
	rep, err := c.Reclaim(ctx, "p", time.Hour)
	if !errors.Is(err, yuanrong.ErrUnknownStrategy) || rep.Left == 0 {
		t.Errorf("reclaim: %+v, %v; want the cell left and ErrUnknownStrategy", rep, err)
	}
}

// A publish failing part-way through a tq put leaves nothing: no row is
// visible, no key or created buffer is left in the datasystem. With tq's
// KeysLimit 4 tq stages and writes three chunks concurrently; with its
// default, one chunk of 10, the Backend publishes it in three rounds.
func TestTQRollbackOnPublishFailure(t *testing.T) {
	for _, tqLimit := range []int{4, tq.DefaultKeysLimit} {
		t.Run(fmt.Sprintf("tqKeysLimit%d", tqLimit), func(t *testing.T) {
			ctx := t.Context()
			local := yuanrong.NewLocal()
			ds := &countingDS{DataSystem: local, failPublish: 2}
			c := newTQ(t, newBackend(t, ds, yuanrong.WithPutKeysLimit(4)), nil, tq.WithKeysLimit(tqLimit))
			keys := keysN("row", 10)
			err := c.BatchPut(ctx, "p", keys, tq.Batch{"f": tq.Stacked(make([]float32, 10), 10)}, nil)
			if !errors.Is(err, errPublish) {
				t.Fatalf("put: %v, want the injected fault", err)
			}
			if _, publishes, _, _ := ds.calls(); len(publishes) < 2 {
				t.Fatalf("publishes %v: the fault was never reached", publishes)
			}
			if m, err := c.List(ctx, "p"); err != nil || len(m.Rows) != 0 {
				t.Fatalf("rows visible after a failed put: %v %v", m, err)
			}
			if local.Len() != 0 || local.Pending() != 0 {
				t.Fatalf("datasystem holds %d keys and %d created buffers after rollback", local.Len(), local.Pending())
			}
		})
	}
}

// Through tq, 25,001 cells give three create, publish and get rounds.
func TestTQBatchesAtKeyLimits(t *testing.T) {
	ctx := t.Context()
	ds := &countingDS{DataSystem: yuanrong.NewLocal()}
	c := newTQ(t, newBackend(t, ds), nil)
	const n = 25_001
	keys := keysN("row", n)
	if err := c.BatchPut(ctx, "p", keys, tq.Batch{"r": tq.Stacked(make([]float32, n), n)}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.BatchGet(ctx, "p", keys); err != nil {
		t.Fatal(err)
	}
	creates, publishes, gets, _ := ds.calls()
	slices.Sort(creates)
	slices.Sort(publishes) // tq publishes its chunks concurrently
	slices.Sort(gets)
	want := []int{5_001, 10_000, 10_000}
	if !slices.Equal(creates, want) || !slices.Equal(publishes, want) || !slices.Equal(gets, want) {
		t.Fatalf("creates %v publishes %v gets %v, want %v each", creates, publishes, gets, want)
	}
}

func TestClientConformance(t *testing.T) {
	tqtest.Run(t, func(t *testing.T) tqtest.Engine {
		data := newBackend(t, yuanrong.NewLocal(), yuanrong.WithPutKeysLimit(7), yuanrong.WithGetClearKeysLimit(5))
		meta := memory.NewMetaStore()
		t.Cleanup(func() { _ = meta.Close() })
		return tqtest.Engine{
			Open: func(t *testing.T) *tq.Client { return newTQ(t, data, meta) },
			Data: data,
			Meta: meta,
		}
	})
}
