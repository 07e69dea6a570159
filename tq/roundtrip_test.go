package tq_test

import (
	"context"
	"reflect"
	"runtime"
	"slices"
	"testing"

	"github.com/tqgo/tqgo/backends/memory"
	"github.com/tqgo/tqgo/codec"
	"github.com/tqgo/tqgo/tq"
)

func TestStackedRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name  string
		shape []int64
	}{
		{"B", []int64{5}},
		{"BL", []int64{5, 3}},
		{"BLD", []int64{5, 3, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := memClient(t)
			n, _ := codec.NumElements(tc.shape)
			data := seq[float32](0, n)
			col := tq.Stacked(data, intShape(tc.shape)...)
			if col.Err() != nil || col.Kind() != tq.KindStacked || col.Len() != 5 {
				t.Fatalf("Stacked: err %v kind %v len %d", col.Err(), col.Kind(), col.Len())
			}
			// The column, and each of its rows, views data without copying.
			st, _ := col.Tensor()
			if !codec.Aliases(data, st) {
				t.Fatal("Stacked copied its data")
			}
			rb := st.RowBytes()
			for i := range 5 {
				r := col.Row(i).(codec.Tensor)
				if !slices.Equal(r.Shape, tc.shape[1:]) || &r.Data[0] != &st.Data[i*rb] {
					t.Fatalf("put row %d: shape %v, not a view of the stacked tensor", i, r.Shape)
				}
			}
			keys := keysN("k", 5)
			mustPut(t, c, "p", keys, tq.Batch{"x": col}, nil)

			// Ask in another order: row i of the result is keys[want[i]].
			ask := []string{"k3", "k0", "k4", "k1", "k2"}
			want := []int{3, 0, 4, 1, 2}
			got := mustGet(t, c, "p", ask)["x"]
			gt, ok := got.Tensor()
			if !ok || got.Kind() != tq.KindStacked {
				t.Fatalf("kind %v, want stacked", got.Kind())
			}
			if gt.DType != codec.Float32 || !slices.Equal(gt.Shape, tc.shape) {
				t.Fatalf("got %s%v, want float32%v", gt.DType, gt.Shape, tc.shape)
			}
			per := n / 5
			all := flat[float32](t, got)
			if !codec.Aliases(all, gt) {
				t.Fatal("As copied an aligned stacked tensor")
			}
			for i, k := range want {
				if !slices.Equal(all[i*per:(i+1)*per], data[k*per:(k+1)*per]) {
					t.Fatalf("row %d (%s) = %v, want %v", i, ask[i], all[i*per:(i+1)*per], data[k*per:(k+1)*per])
				}
				r := got.Row(i).(codec.Tensor)
				if !slices.Equal(r.Shape, tc.shape[1:]) || &r.Data[0] != &gt.Data[i*rb] {
					t.Fatalf("got row %d: shape %v, not a view of the stacked tensor", i, r.Shape)
				}
			}
			ts, _ := got.Tensors()
			for i, r := range ts {
				if &r.Data[0] != &gt.Data[i*rb] {
					t.Fatalf("Tensors()[%d] is not a view of the stacked tensor", i)
				}
			}
		})
	}
}

func TestStackedTensorColumn(t *testing.T) {
	c, _ := memClient(t)
	// A dtype Go has no element type for travels as bytes.
	raw := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	bf, err := codec.NewTensor(codec.BFloat16, []int64{2, 2}, raw)
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, c, "p", []string{"a", "b"}, tq.Batch{"h": tq.StackedTensor(bf)}, nil)
	got, ok := mustGet(t, c, "p", []string{"b", "a"})["h"].Tensor()
	if !ok || got.DType != codec.BFloat16 || !slices.Equal(got.Shape, []int64{2, 2}) {
		t.Fatalf("got %s%v", got.DType, got.Shape)
	}
	if want := []byte{5, 6, 7, 8, 1, 2, 3, 4}; !slices.Equal(got.Data, want) {
		t.Fatalf("data %v, want %v", got.Data, want)
	}
}

func TestJaggedRoundTrip(t *testing.T) {
	c, _ := memClient(t)
	keys := []string{"a", "b", "c"}
	resp := [][]int32{{1}, {2, 3}, {4, 5, 6}}
	mustPut(t, c, "p", keys, tq.Batch{"resp": tq.JaggedOf(resp)}, nil)
	got := mustGet(t, c, "p", []string{"c", "a", "b"})["resp"]
	if got.Kind() != tq.KindJagged || got.Len() != 3 {
		t.Fatalf("kind %v len %d, want jagged of 3", got.Kind(), got.Len())
	}
	if _, ok := got.Tensor(); ok {
		t.Fatal("a jagged column claims a stacked tensor")
	}
	rows := rowsOf[int32](t, got)
	want := [][]int32{resp[2], resp[0], resp[1]}
	if !reflect.DeepEqual(rows, want) {
		t.Fatalf("rows %v, want %v", rows, want)
	}
	if all := flat[int32](t, got); !slices.Equal(all, []int32{4, 5, 6, 1, 2, 3}) {
		t.Fatalf("As = %v", all)
	}

	// Rows of one length come back stacked.
	same := [][]int64{{1, 2}, {3, 4}, {5, 6}}
	mustPut(t, c, "p", keys, tq.Batch{"same": tq.JaggedOf(same)}, nil)
	got = mustGet(t, c, "p", []string{"b", "c"}, "same")["same"]
	st, ok := got.Tensor()
	if !ok || got.Kind() != tq.KindStacked || !slices.Equal(st.Shape, []int64{2, 2}) {
		t.Fatalf("kind %v shape %v, want stacked [2 2]", got.Kind(), st.Shape)
	}
	if all := flat[int64](t, got); !slices.Equal(all, []int64{3, 4, 5, 6}) {
		t.Fatalf("As = %v", all)
	}

	// Jagged of explicit tensors: dtypes may differ too, which is jagged.
	a, _ := codec.FromSlice([]float32{1, 2})
	b, _ := codec.FromSlice([]float64{3, 4})
	mustPut(t, c, "p", keys[:2], tq.Batch{"mixed": tq.Jagged([]codec.Tensor{a, b})}, nil)
	got = mustGet(t, c, "p", keys[:2], "mixed")["mixed"]
	ts, err := got.Tensors()
	if err != nil || got.Kind() != tq.KindJagged || ts[0].DType != codec.Float32 || ts[1].DType != codec.Float64 {
		t.Fatalf("kind %v tensors %v err %v", got.Kind(), ts, err)
	}
}

func TestValuesRoundTrip(t *testing.T) {
	c, _ := memClient(t)
	keys := []string{"a", "b", "c", "d"}
	vec, _ := codec.FromSlice([]int32{7, 8})
	in := tq.Batch{
		"uid":   tq.ValuesOf([]string{"u0", "u1", "u2", "u3"}),
		"n":     tq.ValuesOf([]int{1, -2, 3, 1 << 40}),
		"score": tq.ValuesOf([]float64{0.5, -1, 2.25, 0}),
		"any": tq.Values([]any{
			map[string]any{"ok": true, "n": int64(3), "nested": []any{"x", nil}},
			[]any{int64(1), "two", 3.5, []byte{9}},
			nil,
			vec,
		}),
	}
	mustPut(t, c, "p", keys, in, nil)
	got := mustGet(t, c, "p", []string{"d", "c", "b", "a"})
	want := map[string][]any{
		"uid":   {"u3", "u2", "u1", "u0"},
		"n":     {int64(1 << 40), int64(3), int64(-2), int64(1)}, // integers decode as int64
		"score": {0.0, 2.25, -1.0, 0.5},
		"any": {
			vec,
			nil,
			[]any{int64(1), "two", 3.5, []byte{9}},
			map[string]any{"ok": true, "n": int64(3), "nested": []any{"x", nil}},
		},
	}
	if fs := got.Fields(); !slices.Equal(fs, []string{"any", "n", "score", "uid"}) {
		t.Fatalf("fields %v", fs)
	}
	for f, w := range want {
		col := got[f]
		if col.Kind() != tq.KindValues {
			t.Fatalf("%s: kind %v, want values", f, col.Kind())
		}
		if f == "any" {
			if tv, ok := col.Row(0).(codec.Tensor); !ok || !tensorEqual(tv, vec) {
				t.Fatalf("any row 0 = %#v, want %v", col.Row(0), vec)
			}
			w, col = w[1:], tq.Values(col.Values()[1:])
		}
		if !reflect.DeepEqual(col.Values(), w) {
			t.Fatalf("%s = %#v, want %#v", f, col.Values(), w)
		}
	}

	// A values column whose rows are tensors of one layout reads back stacked.
	t0, _ := codec.FromSlice([]int64{1, 2})
	t1, _ := codec.FromSlice([]int64{3, 4})
	mustPut(t, c, "p", keys[:2], tq.Batch{"tv": tq.Values([]any{t0, &t1})}, nil)
	got = mustGet(t, c, "p", keys[:2], "tv")
	if got["tv"].Kind() != tq.KindStacked || !slices.Equal(flat[int64](t, got["tv"]), []int64{1, 2, 3, 4}) {
		t.Fatalf("tensor values: kind %v", got["tv"].Kind())
	}
	// A values column mixing tensors and other values has no tensor view.
	if _, err := tq.RowsAs[int64](mustGet(t, c, "p", keys, "any")["any"]); err == nil {
		t.Fatal("RowsAs of a mixed values column succeeded")
	}
}

func tensorEqual(a, b codec.Tensor) bool {
	return codec.SameLayout(a, b) && slices.Equal(a.Data, b.Data)
}

func TestMixedBatchAndSelect(t *testing.T) {
	c, _ := memClient(t)
	keys := keysN("s", 4)
	mustPut(t, c, "p", keys, tq.Batch{
		"input_ids": tq.Stacked(seq[int64](0, 12), 4, 3),
		"responses": tq.JaggedOf([][]int64{{1}, {1, 2}, {1, 2, 3}, {}}),
		"rewards":   tq.Stacked(seq[float32](10, 4), 4),
		"uid":       tq.ValuesOf([]string{"a", "b", "c", "d"}),
	}, nil)

	// No fields: every field the rows have.
	all := mustGet(t, c, "p", keys)
	if fs := all.Fields(); !slices.Equal(fs, []string{"input_ids", "responses", "rewards", "uid"}) {
		t.Fatalf("fields %v", fs)
	}
	kinds := map[string]tq.ColumnKind{"input_ids": tq.KindStacked, "responses": tq.KindJagged, "rewards": tq.KindStacked, "uid": tq.KindValues}
	for f, k := range kinds {
		if all[f].Kind() != k || all[f].Len() != 4 {
			t.Fatalf("%s: kind %v len %d, want %v of 4", f, all[f].Kind(), all[f].Len(), k)
		}
	}
	if all.Len() != 4 {
		t.Fatalf("batch Len %d", all.Len())
	}
	if r := rowsOf[int64](t, all["responses"]); len(r[3]) != 0 || !slices.Equal(r[2], []int64{1, 2, 3}) {
		t.Fatalf("responses %v", r)
	}

	// Some fields, in any order, for some keys, in any order.
	got := mustGet(t, c, "p", []string{"s2", "s0"}, "uid", "rewards")
	if fs := got.Fields(); !slices.Equal(fs, []string{"rewards", "uid"}) {
		t.Fatalf("fields %v", fs)
	}
	if r := flat[float32](t, got["rewards"]); !slices.Equal(r, []float32{12, 10}) {
		t.Fatalf("rewards %v", r)
	}
	if u := got["uid"].Values(); !reflect.DeepEqual(u, []any{"c", "a"}) {
		t.Fatalf("uid %v", u)
	}

	// No keys: an empty result, not an error.
	if b, err := c.BatchGet(context.Background(), "p", nil); err != nil || len(b) != 0 {
		t.Fatalf("BatchGet of no keys = %v, %v", b, err)
	}
}

func TestColumnsAddedOverTime(t *testing.T) {
	ctx := context.Background()
	c, st := memClient(t)
	keys := keysN("q", 4)
	// The rollout writes prompts and responses.
	mustPut(t, c, "train", keys, tq.Batch{
		"prompts":   tq.Stacked(seq[int64](0, 8), 4, 2),
		"responses": tq.JaggedOf([][]int64{{1}, {2, 2}, {3, 3, 3}, {4}}),
	}, []tq.Tag{{"status": "generated"}, {"status": "generated"}, {"status": "generated"}, {"status": "generated"}})
	// The reward worker scores them later, in its own order, one at a time
	// for the last one.
	mustPut(t, c, "train", []string{"q2", "q0", "q1"}, tq.Batch{"rewards": tq.Stacked([]float32{2, 0, 1}, 3)}, nil)
	if err := c.Put(ctx, "train", "q3", map[string]any{"rewards": codec.Scalar(float32(3))}, tq.Tag{"status": "rewarded"}); err != nil {
		t.Fatal(err)
	}
	if st.Len() != 3*4 {
		t.Fatalf("store holds %d cells, want 12", st.Len())
	}

	got := mustGet(t, c, "train", keys)
	if fs := got.Fields(); !slices.Equal(fs, []string{"prompts", "responses", "rewards"}) {
		t.Fatalf("fields %v", fs)
	}
	if r := flat[float32](t, got["rewards"]); !slices.Equal(r, []float32{0, 1, 2, 3}) {
		t.Fatalf("rewards %v", r)
	}
	if r := rowsOf[int64](t, got["responses"]); !slices.Equal(r[1], []int64{2, 2}) {
		t.Fatalf("responses %v", r)
	}
	m, err := c.Lookup(ctx, "train", []string{"q3", "q0"})
	if err != nil {
		t.Fatal(err)
	}
	if m.Rows[0].Tag["status"] != "rewarded" || m.Rows[1].Tag["status"] != "generated" {
		t.Fatalf("tags %v %v", m.Rows[0].Tag, m.Rows[1].Tag)
	}
	fi := m.Rows[0].Fields["rewards"]
	if len(m.Rows[0].Fields) != 3 || fi.DType != "float32" || len(fi.Shape) != 0 {
		t.Fatalf("q3 fields %v", m.Rows[0].Fields)
	}
	if fi := m.Rows[1].Fields["prompts"]; fi.DType != "int64" || !slices.Equal(fi.Shape, []int{2}) {
		t.Fatalf("q0 prompts %+v", fi)
	}
}

func TestPutSingleRow(t *testing.T) {
	ctx := context.Background()
	c, _ := memClient(t)
	ids, _ := codec.FromSlice([]int64{5, 6, 7})
	err := c.Put(ctx, "p", "k", map[string]any{
		"ids":   ids,
		"ptr":   &ids,
		"nilp":  (*codec.Tensor)(nil),
		"label": "hello",
	}, tq.Tag{"step": int64(1)})
	if err != nil {
		t.Fatal(err)
	}
	got := mustGet(t, c, "p", []string{"k"})
	if got["ids"].Kind() != tq.KindStacked || !slices.Equal(flat[int64](t, got["ids"]), []int64{5, 6, 7}) {
		t.Fatalf("ids %v", got["ids"].Values())
	}
	if !slices.Equal(flat[int64](t, got["ptr"]), []int64{5, 6, 7}) {
		t.Fatalf("ptr %v", got["ptr"].Values())
	}
	if v := got["nilp"].Values(); len(v) != 1 || v[0] != nil {
		t.Fatalf("nilp %v", v)
	}
	if v := got["label"].Values(); !reflect.DeepEqual(v, []any{"hello"}) {
		t.Fatalf("label %v", v)
	}
}

func TestTags(t *testing.T) {
	ctx := context.Background()
	c, st := memClient(t)
	keys := []string{"a", "b"}
	mustPut(t, c, "p", keys, tq.Batch{"x": tq.Stacked([]int64{1, 2}, 2)},
		[]tq.Tag{{"step": int64(3), "status": "generated"}, {"step": int64(3)}})

	// Tag-only update: no columns; merged into each row, data untouched.
	mustPut(t, c, "p", keys, nil, []tq.Tag{{"status": "rewarded", "score": 0.5}, nil})
	if err := c.BatchPut(ctx, "p", []string{"b"}, tq.Batch{}, []tq.Tag{{"status": "skipped"}}); err != nil {
		t.Fatal(err)
	}
	if st.Len() != 2 {
		t.Fatalf("tag updates changed the store: %d cells", st.Len())
	}
	// A data write with nil tags leaves them alone.
	mustPut(t, c, "p", keys, tq.Batch{"y": tq.Stacked([]int64{3, 4}, 2)}, nil)

	want := map[string]tq.Tag{
		"a": {"step": int64(3), "status": "rewarded", "score": 0.5},
		"b": {"step": int64(3), "status": "skipped"},
	}
	m, err := c.List(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Rows) != 2 {
		t.Fatalf("List: %d rows", len(m.Rows))
	}
	for _, r := range m.Rows {
		if !reflect.DeepEqual(r.Tag, want[r.Key]) {
			t.Fatalf("List tag of %s = %v, want %v", r.Key, r.Tag, want[r.Key])
		}
		if len(r.Fields) != 2 {
			t.Fatalf("row %s fields %v", r.Key, r.Fields)
		}
	}
	lk, err := c.Lookup(ctx, "p", []string{"b", "a"})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(lk.Rows[0].Tag, want["b"]) || !reflect.DeepEqual(lk.Rows[1].Tag, want["a"]) {
		t.Fatalf("Lookup tags %v %v", lk.Rows[0].Tag, lk.Rows[1].Tag)
	}
	if got := flat[int64](t, mustGet(t, c, "p", keys, "x")["x"]); !slices.Equal(got, []int64{1, 2}) {
		t.Fatalf("x after tag updates = %v", got)
	}

	// A tag-only write of a new key makes a row with a tag and no fields.
	mustPut(t, c, "p", []string{"fresh"}, nil, []tq.Tag{{"status": "queued"}})
	lk, err = c.Lookup(ctx, "p", []string{"fresh"})
	if err != nil {
		t.Fatal(err)
	}
	if r := lk.Rows[0]; len(r.Fields) != 0 || r.Tag["status"] != "queued" {
		t.Fatalf("fresh row %+v", r)
	}
	if _, err := c.BatchGet(ctx, "p", []string{"fresh"}, "x"); !isKeyErr(err, tq.ErrNotReady, "fresh", "x") {
		t.Fatalf("BatchGet of a tag-only row: %v", err)
	}
}

// TestReturnedMetaIsACopy: what List and Lookup return belongs to the
// caller; changing it must not change the store's rows.
func TestReturnedMetaIsACopy(t *testing.T) {
	ctx := context.Background()
	c, _ := memClient(t)
	mustPut(t, c, "p", []string{"a"}, tq.Batch{"x": tq.Stacked([]int64{1, 2}, 1, 2)}, []tq.Tag{{"step": int64(1)}})
	m, err := c.List(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	m.Rows[0].Tag["step"] = int64(99)
	m.Rows[0].Tag["extra"] = true
	m.Rows[0].Fields["x"].Shape[0] = 77
	lk, err := c.Lookup(ctx, "p", []string{"a"})
	if err != nil {
		t.Fatal(err)
	}
	if r := lk.Rows[0]; !reflect.DeepEqual(r.Tag, tq.Tag{"step": int64(1)}) || !slices.Equal(r.Fields["x"].Shape, []int{2}) {
		t.Fatalf("store row changed through List's result: tag %v shape %v", r.Tag, r.Fields["x"].Shape)
	}
}

func TestListIndexesAndClear(t *testing.T) {
	ctx := context.Background()
	c, st := memClient(t)
	x := func(n int) tq.Batch { return tq.Batch{"x": tq.Stacked(seq[int64](0, n), n)} }
	mustPut(t, c, "p", []string{"c", "a", "b"}, x(3), nil)
	mustPut(t, c, "p", []string{"e", "d"}, x(2), nil)
	mustPut(t, c, "other", []string{"a"}, x(1), nil)

	m, err := c.List(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Keys(); !slices.Equal(got, []string{"c", "a", "b", "e", "d"}) {
		t.Fatalf("List order %v, want put order (global index order)", got)
	}
	idx := map[string]uint64{}
	for i, r := range m.Rows {
		if i > 0 && r.Index <= m.Rows[i-1].Index {
			t.Fatalf("indexes not increasing: %d then %d", m.Rows[i-1].Index, r.Index)
		}
		idx[r.Key] = r.Index
	}
	if st.Len() != 6 {
		t.Fatalf("store %d cells, want 6", st.Len())
	}

	// Clear removes rows and their bytes; unknown keys are ignored.
	if err := c.Clear(ctx, "p", []string{"a", "nope", "e"}); err != nil {
		t.Fatal(err)
	}
	if st.Len() != 4 {
		t.Fatalf("store %d cells after Clear, want 4", st.Len())
	}
	if _, err := c.BatchGet(ctx, "p", []string{"a"}); !isKeyErr(err, tq.ErrNotFound, "a", "") {
		t.Fatalf("BatchGet of a cleared key: %v", err)
	}
	if err := c.Clear(ctx, "nowhere", []string{"a"}); err != nil {
		t.Fatalf("Clear in an unknown partition: %v", err)
	}
	// "a" of the other partition is untouched.
	if got := flat[int64](t, mustGet(t, c, "other", []string{"a"})["x"]); !slices.Equal(got, []int64{0}) {
		t.Fatalf("other/a = %v", got)
	}

	// A re-put key gets a new index, larger than any before: never reused.
	mustPut(t, c, "p", []string{"a"}, x(1), nil)
	m, _ = c.List(ctx, "p")
	if got := m.Keys(); !slices.Equal(got, []string{"c", "b", "d", "a"}) {
		t.Fatalf("List after re-put %v", got)
	}
	last := m.Rows[len(m.Rows)-1]
	for k, i := range idx {
		if last.Index <= i {
			t.Fatalf("re-put a got index %d, not above %s's %d", last.Index, k, i)
		}
	}

	// Partitions, and ClearPartition.
	ps, err := c.Partitions(ctx)
	if err != nil || !slices.Equal(ps, []string{"other", "p"}) {
		t.Fatalf("Partitions %v %v", ps, err)
	}
	if err := c.ClearPartition(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	if st.Len() != 1 {
		t.Fatalf("store %d cells after ClearPartition, want 1", st.Len())
	}
	if m, err := c.List(ctx, "p"); err != nil || len(m.Rows) != 0 || m.Partition != "p" {
		t.Fatalf("List of a cleared partition: %+v %v", m, err)
	}
	if ps, _ := c.Partitions(ctx); !slices.Equal(ps, []string{"other"}) {
		t.Fatalf("Partitions after ClearPartition %v", ps)
	}
	if err := c.ClearPartition(ctx, "nowhere"); err != nil {
		t.Fatalf("ClearPartition of an unknown partition: %v", err)
	}
	// Clearing every key of a partition drops it from Partitions too.
	if err := c.Clear(ctx, "other", []string{"a"}); err != nil {
		t.Fatal(err)
	}
	if ps, _ := c.Partitions(ctx); len(ps) != 0 || st.Len() != 0 {
		t.Fatalf("Partitions %v, store %d cells after clearing all", ps, st.Len())
	}
	// A re-created partition starts a fresh, still increasing, index run.
	mustPut(t, c, "p", []string{"z"}, x(1), nil)
	if m, _ := c.List(ctx, "p"); m.Rows[0].Index <= last.Index {
		t.Fatalf("index %d after ClearPartition, not above %d", m.Rows[0].Index, last.Index)
	}
}

func TestOverwrite(t *testing.T) {
	ctx := context.Background()
	s := newSpy(nil)
	c := newClient(t, s, nil)
	keys := []string{"a", "b"}
	mustPut(t, c, "p", keys, tq.Batch{"x": tq.Stacked([]int64{1, 2}, 2), "y": tq.ValuesOf([]string{"y0", "y1"})}, nil)
	if got := s.live(t); !slices.Equal(got, []string{"0@x", "0@y", "1@x", "1@y"}) {
		t.Fatalf("storage keys %v", got)
	}
	for round := int64(1); round <= 3; round++ {
		// Overwrite x of both, with another dtype and shape the last time.
		col := tq.Stacked([]int64{10 * round, 20 * round}, 2)
		if round == 3 {
			col = tq.JaggedOf([][]float32{{1, 2}, {3}})
		}
		mustPut(t, c, "p", keys, tq.Batch{"x": col}, nil)
		if s.inner.Len() != 4 {
			t.Fatalf("round %d: store %d cells, want 4: old generations kept", round, s.inner.Len())
		}
		got := mustGet(t, c, "p", []string{"b", "a"})
		if round < 3 {
			if v := flat[int64](t, got["x"]); !slices.Equal(v, []int64{20 * round, 10 * round}) {
				t.Fatalf("round %d: x = %v", round, v)
			}
		} else if r := rowsOf[float32](t, got["x"]); !reflect.DeepEqual(r, [][]float32{{3}, {1, 2}}) {
			t.Fatalf("round 3: x = %v", r)
		}
		if v := got["y"].Values(); !reflect.DeepEqual(v, []any{"y1", "y0"}) {
			t.Fatalf("y changed: %v", v)
		}
	}
	// Each overwrite writes a new generation and the old one is deleted.
	if got := s.live(t); !slices.Equal(got, []string{"0@x#3", "0@y", "1@x#3", "1@y"}) {
		t.Fatalf("storage keys %v", got)
	}
	m, _ := c.Lookup(ctx, "p", []string{"a"})
	if fi := m.Rows[0].Fields["x"]; fi.DType != "float32" || !slices.Equal(fi.Shape, []int{2}) {
		t.Fatalf("x info after overwrite %+v", fi)
	}
}

func TestBatchGetByMeta(t *testing.T) {
	ctx := context.Background()
	s := newSpy(nil)
	c := newClient(t, s, nil)
	keys := keysN("k", 4)
	mustPut(t, c, "p", keys, tq.Batch{
		"x": tq.Stacked(seq[int64](0, 4), 4),
		"u": tq.ValuesOf([]string{"a", "b", "c", "d"}),
	}, nil)

	listed, err := c.List(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	s.resetCalls()
	got, err := c.BatchGetByMeta(ctx, listed)
	if err != nil {
		t.Fatal(err)
	}
	if v := flat[int64](t, got["x"]); !slices.Equal(v, []int64{0, 1, 2, 3}) || got["u"].Len() != 4 {
		t.Fatalf("by List meta: x %v u %v", v, got["u"].Values())
	}
	if n := s.count("get"); n != 1 {
		t.Fatalf("%d backend gets, want 1", n)
	}

	looked, err := c.Lookup(ctx, "p", []string{"k2", "k0"})
	if err != nil {
		t.Fatal(err)
	}
	got, err = c.BatchGetByMeta(ctx, looked, "u")
	if err != nil {
		t.Fatal(err)
	}
	if v := got["u"].Values(); !reflect.DeepEqual(v, []any{"c", "a"}) || len(got) != 1 {
		t.Fatalf("by Lookup meta: %v", got)
	}
	// A slice of a listed meta is a meta too.
	sub := &tq.BatchMeta{Partition: "p", Rows: listed.Rows[1:3]}
	got, err = c.BatchGetByMeta(ctx, sub, "x")
	if err != nil || !slices.Equal(flat[int64](t, got["x"]), []int64{1, 2}) {
		t.Fatalf("by sub-meta: %v", err)
	}

	// Overwritten since the meta was taken: the new value, not an error.
	mustPut(t, c, "p", []string{"k0", "k2"}, tq.Batch{"x": tq.Stacked([]int64{100, 102}, 2)}, nil)
	for name, m := range map[string]*tq.BatchMeta{"list": listed, "lookup": looked} {
		got, err := c.BatchGetByMeta(ctx, m, "x")
		if err != nil {
			t.Fatalf("%s meta after overwrite: %v", name, err)
		}
		want := []int64{100, 1, 102, 3}
		if name == "lookup" {
			want = []int64{102, 100}
		}
		if v := flat[int64](t, got["x"]); !slices.Equal(v, want) {
			t.Fatalf("%s meta after overwrite: x = %v, want %v", name, v, want)
		}
	}
	// Cleared and re-put since: the new row.
	if err := c.Clear(ctx, "p", []string{"k1"}); err != nil {
		t.Fatal(err)
	}
	mustPut(t, c, "p", []string{"k1"}, tq.Batch{"x": tq.Stacked([]int64{-1}, 1)}, nil)
	got, err = c.BatchGetByMeta(ctx, sub, "x")
	if err != nil || !slices.Equal(flat[int64](t, got["x"]), []int64{-1, 102}) {
		t.Fatalf("by sub-meta after re-put: %v", err)
	}
	// Cleared and gone: ErrNotFound naming the key.
	if err := c.Clear(ctx, "p", []string{"k3"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.BatchGetByMeta(ctx, listed, "x"); !isKeyErr(err, tq.ErrNotFound, "k3", "") {
		t.Fatalf("by meta of a cleared row: %v", err)
	}
	// A meta built by hand (no store records) is looked up.
	hand := &tq.BatchMeta{Partition: "p", Rows: []tq.RowInfo{{Key: "k2"}}}
	got, err = c.BatchGetByMeta(ctx, hand, "x")
	if err != nil || !slices.Equal(flat[int64](t, got["x"]), []int64{102}) {
		t.Fatalf("by hand-built meta: %v", err)
	}
}

// TestMetaDoesNotAliasCallerShape: the metadata keeps its own copy of a
// cell's shape, not the slice the caller built the column from and may
// reuse for the next batch.
func TestMetaDoesNotAliasCallerShape(t *testing.T) {
	ctx := context.Background()
	c, _ := memClient(t)
	shape := []int{2, 3}
	mustPut(t, c, "p", []string{"a", "b"}, tq.Batch{"x": tq.Stacked(seq[int64](0, 6), shape...)}, nil)
	shape[1] = 99
	m, err := c.Lookup(ctx, "p", []string{"a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range m.Rows {
		if got := r.Fields["x"].Shape; !slices.Equal(got, []int{3}) {
			t.Fatalf("row %s shape %v after the caller reused its shape slice, want [3]", r.Key, got)
		}
	}
}

// TestPackPaths: small cells are packed on the calling goroutine; large
// ones go to the pool once a batch holds enough of them; the data round-
// trips either way. Which path ran is read from PackStats, not timed.
func TestPackPaths(t *testing.T) {
	const rows, per = 4, 64 << 10 // 4 rows of 64 Ki float32: 256 KiB each
	big := seq[float32](0, rows*per)
	keys := keysN("k", rows)
	// Tensor columns are never packed: the large cells are tensors in a
	// values column, which the codec packs.
	bigRows := make([]any, rows)
	for i := range bigRows {
		x, err := codec.FromSlice(big[i*per:(i+1)*per], per)
		if err != nil {
			t.Fatal(err)
		}
		bigRows[i] = x
	}
	batch := tq.Batch{"big": tq.Values(bigRows), "small": tq.ValuesOf([]int{1, 2, 3, 4})}
	memClient := func(t *testing.T, opts ...tq.Option) (*tq.Client, *memory.Store) {
		st := memory.New()
		return newClient(t, st, nil, opts...), st
	}

	c, _ := memClient(t)
	mustPut(t, c, "p", keys, batch, nil)
	if st := c.PackStats(); st.SerialObjects != 2*rows || st.PooledObjects != 0 || st.Batches != 1 {
		t.Fatalf("default options, 1 MiB batch: %+v, want all %d objects serial", st, 2*rows)
	}

	c, _ = memClient(t, tq.WithDSMaxWorkers(2), tq.WithPackThreshold(64<<10), tq.WithPoolMinBatchBytes(1))
	mustPut(t, c, "p", keys, batch, nil)
	st := c.PackStats()
	if runtime.GOMAXPROCS(0) >= 2 && (st.PooledObjects != rows || st.SerialObjects != rows || st.PoolRuns != 1) {
		t.Fatalf("pool engaged for any large object: %+v, want %d pooled, %d serial, 1 run", st, rows, rows)
	}
	got := mustGet(t, c, "p", keys)
	if v := flat[float32](t, got["big"]); !slices.Equal(v, big) {
		t.Fatal("big column changed on the way")
	}
}

// TestRowsOfABatchStayApart: the rows of one put share their metadata, yet
// rewriting some of them, or giving one a new field or tag, leaves the
// others as they were, and the store's cells follow.
func TestRowsOfABatchStayApart(t *testing.T) {
	c, st := memClient(t)
	ctx := context.Background()
	keys := keysN("k", 6)
	mustPut(t, c, "p", keys, tq.Batch{"x": tq.Stacked(seq[int64](0, 12), 6, 2)}, nil)
	mustPut(t, c, "p", keys[1:3], tq.Batch{"x": tq.Stacked(seq[int64](100, 4), 2, 2)}, nil)
	mustPut(t, c, "p", keys[3:4], tq.Batch{"y": tq.Stacked([]float32{0.5})}, []tq.Tag{{"s": "r"}})
	mustPut(t, c, "p", keys[4:6], tq.Batch{"x": tq.JaggedOf([][]int64{{7}, {8, 9, 10}})}, nil)

	want := [][]int64{{0, 1}, {100, 101}, {102, 103}, {6, 7}, {7}, {8, 9, 10}}
	if got := rowsOf[int64](t, mustGet(t, c, "p", keys, "x")["x"]); !reflect.DeepEqual(got, want) {
		t.Fatalf("x = %v, want %v", got, want)
	}
	m, err := c.List(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range m.Rows {
		wantFields, wantShape := 1, []int{len(want[i])}
		if i == 3 {
			wantFields = 2
		}
		if len(r.Fields) != wantFields || !slices.Equal(r.Fields["x"].Shape, wantShape) || (r.Tag["s"] == "r") != (i == 3) {
			t.Fatalf("row %d: fields %v, tag %v", i, r.Fields, r.Tag)
		}
	}
	if n := st.Len(); n != 7 { // six x cells, one y
		t.Fatalf("%d cells stored, want 7", n)
	}
	if err := c.Clear(ctx, "p", keys[:3]); err != nil {
		t.Fatal(err)
	}
	if got := rowsOf[int64](t, mustGet(t, c, "p", keys[3:], "x")["x"]); !reflect.DeepEqual(got, want[3:]) {
		t.Fatalf("x after clearing the first rows = %v", got)
	}
	if n := st.Len(); n != 4 {
		t.Fatalf("%d cells stored after clearing 3 rows, want 4", n)
	}
}
