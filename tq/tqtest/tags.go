package tqtest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/tqgo/tqgo/tq"
)

// tagCases are the rules of tag values: one set of accepted types on every
// engine, checked before anything is written, read back normalised.
func tagCases() []testCase {
	return []testCase{
		{"TagRejectedBeforeAnyWrite", testTagRejected},
		{"TagReadBackNormalised", testTagNormalised},
		{"TagCallerChangesAfterPut", testTagCallerChanges},
		{"TagMergeNormalised", testTagMerge},
		{"TagNegativeZero", testTagNegativeZero},
	}
}

// rejectedTagValues are values of types a Tag does not hold, one per kind.
func rejectedTagValues() map[string]any {
	n := 1
	return map[string]any{
		"chan":          make(chan int),
		"func":          func() {},
		"struct":        struct{ A int }{1},
		"error":         errors.New("boom"),
		"pointer":       &n,
		"time":          time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		"duration":      time.Second,
		"complex":       complex(1, 2),
		"int keys":      map[int]string{1: "a"},
		"array":         [2]int{1, 2},
		"uintptr":       uintptr(1),
		"NaN":           math.NaN(),
		"nested":        []any{"ok", map[string]any{"deep": &n}},
		"typed pointer": []*int{&n},
	}
}

// An invalid tag value fails Put, BatchPut and a tags-only BatchPut with
// ErrInvalid naming the row's key and the tag key, and nothing is written:
// no new row, no new partition, the existing row's fields, values and tag
// unchanged.
func testTagRejected(t *testing.T, e Engine) {
	ctx := context.Background()
	c := e.Open(t)
	const p = "tags-rejected"
	tagPut(t, c, p, []string{"old"}, tq.Batch{"x": tq.Stacked([]int64{7}, 1)}, []tq.Tag{{"v": int64(1)}})
	before := tagList(t, c, p)
	parts := tagPartitions(t, c)
	for name, v := range rejectedTagValues() {
		bad := tq.Tag{"fine": "yes", "bad": v}
		attempts := []struct {
			how string
			key string // the key the error must name
			put func(partition string) error
		}{
			{"Put of a new key", "new", func(partition string) error {
				return c.Put(ctx, partition, "new", map[string]any{"x": "text"}, bad)
			}},
			{"BatchPut of an existing and a new key", "new", func(partition string) error {
				return c.BatchPut(ctx, partition, []string{"old", "new"}, tq.Batch{"x": tq.Stacked([]int64{8, 9}, 2)}, []tq.Tag{{"v": int64(2)}, bad})
			}},
			{"BatchPut replacing a field", "old", func(partition string) error {
				return c.BatchPut(ctx, partition, []string{"old"}, tq.Batch{"x": tq.Stacked([]int64{8}, 1), "y": tq.Values([]any{"new field"})}, []tq.Tag{bad})
			}},
			{"tags-only BatchPut", "old", func(partition string) error {
				return c.BatchPut(ctx, partition, []string{"old"}, nil, []tq.Tag{bad})
			}},
		}
		for _, a := range attempts {
			for _, partition := range []string{p, "tags-rejected-fresh"} {
				err := a.put(partition)
				what := fmt.Sprintf("%s, tag value %s, partition %s", a.how, name, partition)
				tagCheckRejected(t, what, err, partition, a.key)
			}
			if got := tagList(t, c, p); !reflect.DeepEqual(got, before) {
				t.Errorf("%s with %s changed the rows: %v, was %v", a.how, name, got, before)
			}
			if got := tagPartitions(t, c); !slices.Equal(got, parts) {
				t.Errorf("%s with %s changed the partitions: %v, was %v", a.how, name, got, parts)
			}
		}
	}
	if _, err := c.Lookup(ctx, p, []string{"new"}); !errors.Is(err, tq.ErrNotFound) {
		t.Errorf("Lookup of a key only rejected puts named: %v, want ErrNotFound", err)
	}
	b, err := c.BatchGet(ctx, p, []string{"old"}, "x")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := tq.As[int64](b["x"]); err != nil || !slices.Equal(got, []int64{7}) {
		t.Errorf("the row's field reads %v, %v after rejected puts, want [7]", got, err)
	}
	// A second client sees the same: nothing of the rejected puts.
	if got := tagList(t, e.Open(t), p); !reflect.DeepEqual(got, before) {
		t.Errorf("another client lists %v, want %v", got, before)
	}
}

func tagCheckRejected(t *testing.T, what string, err error, partition, key string) {
	t.Helper()
	var ke *tq.KeyError
	var te *tq.TagError
	switch {
	case !errors.Is(err, tq.ErrInvalid):
		t.Errorf("%s: got %v, want ErrInvalid", what, err)
	case !errors.As(err, &ke) || ke.Partition != partition || ke.Key != key:
		t.Errorf("%s: error %v does not name partition %q key %q (KeyError %+v)", what, err, partition, key, ke)
	case !errors.As(err, &te) || te.Tag != "bad":
		t.Errorf("%s: error %v does not name tag key \"bad\" (TagError %+v)", what, err, te)
	}
}

// acceptedTag holds a value of every accepted type; normalisedTag is what
// every client must read back for it.
func acceptedTag() tq.Tag {
	return tq.Tag{
		"nil": nil, "bool": true, "string": "héllo", "empty": "",
		"int": -3, "int8": int8(-8), "int16": int16(300), "int32": int32(7), "int64": int64(math.MinInt64),
		"uint": uint(3), "uint8": uint8(5), "uint16": uint16(65535), "uint32": uint32(1), "uint64": uint64(math.MaxUint64),
		"small uint64": uint64(2),
		"float32":      float32(0.1), "float64": 2.0, "inf": math.Inf(-1),
		"bytes": []byte{0, 1, 255}, "no bytes": []byte(nil),
		"list":    []any{int32(1), "x", nil, []any{uint8(2), 1.5}},
		"map":     map[string]any{"n": int16(4), "m": map[string]any{"u": uint(6), "b": []byte("b")}},
		"strings": []string{"a", "b"},
		"ints":    []int{1, -1},
		"weights": map[string]float32{"r": 0.5},
		"sub tag": tq.Tag{"step": 9},
	}
}

func normalisedTag() tq.Tag {
	return tq.Tag{
		"nil": nil, "bool": true, "string": "héllo", "empty": "",
		"int": int64(-3), "int8": int64(-8), "int16": int64(300), "int32": int64(7), "int64": int64(math.MinInt64),
		"uint": uint64(3), "uint8": uint64(5), "uint16": uint64(65535), "uint32": uint64(1), "uint64": uint64(math.MaxUint64),
		"small uint64": uint64(2),
		"float32":      float64(float32(0.1)), "float64": 2.0, "inf": math.Inf(-1),
		"bytes": []byte{0, 1, 255}, "no bytes": []byte{},
		"list":    []any{int64(1), "x", nil, []any{uint64(2), 1.5}},
		"map":     map[string]any{"n": int64(4), "m": map[string]any{"u": uint64(6), "b": []byte("b")}},
		"strings": []any{"a", "b"},
		"ints":    []any{int64(1), int64(-1)},
		"weights": map[string]any{"r": 0.5},
		"sub tag": map[string]any{"step": int64(9)},
	}
}

// Accepted values read back with their normalised Go types and values, in
// the writer and in another client, by List and Lookup, after a put with
// fields and after a tags-only put.
func testTagNormalised(t *testing.T, e Engine) {
	ctx := context.Background()
	w := e.Open(t)
	const p = "tags-normalised"
	if err := w.Put(ctx, p, "with fields", map[string]any{"x": "text"}, acceptedTag()); err != nil {
		t.Fatal(err)
	}
	if err := w.BatchPut(ctx, p, []string{"tags only", "shared 1", "shared 2"}, nil, append([]tq.Tag{acceptedTag()}, slices.Repeat([]tq.Tag{acceptedTag()}, 2)...)); err != nil {
		t.Fatal(err)
	}
	want := map[string]tq.Tag{"with fields": normalisedTag(), "tags only": normalisedTag(), "shared 1": normalisedTag(), "shared 2": normalisedTag()}
	for name, c := range map[string]*tq.Client{"writer": w, "other client": e.Open(t)} {
		tagWant(t, name+" List", tagList(t, c, p), want)
		tagWant(t, name+" Lookup", tagLookup(t, c, p, "tags only", "with fields", "shared 2", "shared 1"), want)
	}
}

// The caller changing its tag objects after the put (the map, its lists,
// nested maps and byte slices, a map reused for the next put) changes
// nothing in either client.
func testTagCallerChanges(t *testing.T, e Engine) {
	ctx := context.Background()
	w := e.Open(t)
	const p = "tags-caller-changes"
	raw := []byte{1, 2, 3}
	list := []any{int64(1), raw}
	inner := map[string]any{"n": int64(1), "l": list}
	strs := []string{"a"}
	tag := tq.Tag{"raw": raw, "list": list, "inner": inner, "strs": strs, "n": 1}
	if err := w.BatchPut(ctx, p, []string{"a", "b"}, tq.Batch{"x": tq.Stacked([]int64{1, 2}, 2)}, []tq.Tag{tag, tag}); err != nil {
		t.Fatal(err)
	}
	if err := w.Put(ctx, p, "c", map[string]any{"x": "c"}, tag); err != nil {
		t.Fatal(err)
	}
	snapshot := tq.Tag{
		"raw": []byte{1, 2, 3}, "list": []any{int64(1), []byte{1, 2, 3}},
		"inner": map[string]any{"n": int64(1), "l": []any{int64(1), []byte{1, 2, 3}}},
		"strs":  []any{"a"}, "n": int64(1),
	}
	raw[0], list[0], inner["n"], strs[0] = 9, "changed", "changed", "changed"
	inner["added"], tag["n"], tag["added"] = true, "changed", 1
	delete(tag, "raw")
	// The same map, changed, for another row: only that row takes the change.
	if err := w.BatchPut(ctx, p, []string{"d"}, nil, []tq.Tag{tag}); err != nil {
		t.Fatal(err)
	}
	want := map[string]tq.Tag{"a": snapshot, "b": snapshot, "c": snapshot, "d": {
		"list": []any{"changed", []byte{9, 2, 3}}, "strs": []any{"changed"}, "n": "changed", "added": int64(1),
		"inner": map[string]any{"n": "changed", "added": true, "l": []any{"changed", []byte{9, 2, 3}}},
	}}
	raw[1], list[1], inner["n"], tag["n"] = 8, nil, nil, nil // after the last put too
	for name, c := range map[string]*tq.Client{"writer": w, "other client": e.Open(t)} {
		tagWant(t, name, tagList(t, c, p), want)
	}
}

// A later put's tag keys overwrite the row's, its other keys stay, and a
// nil tag leaves the row's tag alone; the merged values are normalised in
// every client.
func testTagMerge(t *testing.T, e Engine) {
	w := e.Open(t)
	const p = "tags-merge"
	tagPut(t, w, p, []string{"a", "b"}, tq.Batch{"x": tq.Stacked([]int64{1, 2}, 2)},
		[]tq.Tag{{"step": int32(1), "status": "generated", "u": uint8(1)}, {"step": int8(1)}})
	tagPut(t, w, p, []string{"a", "b"}, nil, []tq.Tag{{"step": uint16(2), "score": float32(0.5)}, nil})
	tagPut(t, w, p, []string{"a"}, tq.Batch{"y": tq.Values([]any{"reward"})}, []tq.Tag{{"status": []string{"rewarded"}, "u": nil}})
	want := map[string]tq.Tag{
		"a": {"step": uint64(2), "score": 0.5, "status": []any{"rewarded"}, "u": nil},
		"b": {"step": int64(1)},
	}
	for name, c := range map[string]*tq.Client{"writer": w, "other client": e.Open(t)} {
		tagWant(t, name, tagList(t, c, p), want)
		tagWant(t, name+" Lookup", tagLookup(t, c, p, "b", "a"), want)
	}
}

func tagPut(t *testing.T, c *tq.Client, partition string, keys []string, b tq.Batch, tags []tq.Tag) {
	t.Helper()
	if err := c.BatchPut(context.Background(), partition, keys, b, tags); err != nil {
		t.Fatal(err)
	}
}

// tagRow is what a listed row says, for comparing states.
type tagRow struct {
	Index  uint64
	Fields map[string]tq.FieldInfo
	Tag    tq.Tag
}

// tagList lists partition as key to row.
func tagList(t *testing.T, c *tq.Client, partition string) map[string]tagRow {
	t.Helper()
	m, err := c.List(context.Background(), partition)
	if err != nil {
		t.Fatal(err)
	}
	return tagRows(m)
}

func tagLookup(t *testing.T, c *tq.Client, partition string, keys ...string) map[string]tagRow {
	t.Helper()
	m, err := c.Lookup(context.Background(), partition, keys)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Keys(); !slices.Equal(got, keys) {
		t.Fatalf("Lookup of %q answered %q", keys, got)
	}
	return tagRows(m)
}

func tagRows(m *tq.BatchMeta) map[string]tagRow {
	out := make(map[string]tagRow, len(m.Rows))
	for _, r := range m.Rows {
		out[r.Key] = tagRow{Index: r.Index, Fields: r.Fields, Tag: r.Tag}
	}
	return out
}

func tagPartitions(t *testing.T, c *tq.Client) []string {
	t.Helper()
	ps, err := c.Partitions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ps)
	return ps
}

// tagWant checks that rows holds exactly want's keys, each with want's tag:
// the same Go types and values, nested ones included.
func tagWant(t *testing.T, what string, rows map[string]tagRow, want map[string]tq.Tag) {
	t.Helper()
	if len(rows) != len(want) {
		t.Errorf("%s: %d rows, want %d", what, len(rows), len(want))
	}
	for k, wt := range want {
		r, ok := rows[k]
		if !ok {
			t.Errorf("%s: no row %q", what, k)
			continue
		}
		for tk, wv := range wt {
			if gv, ok := r.Tag[tk]; !ok || !reflect.DeepEqual(gv, wv) {
				t.Errorf("%s: row %q tag %q is %T %#v, want %T %#v", what, k, tk, gv, gv, wv, wv)
			}
		}
		for tk, gv := range r.Tag {
			if _, ok := wt[tk]; !ok {
				t.Errorf("%s: row %q has tag %q = %#v, want none", what, k, tk, gv)
			}
		}
	}
}

// A tag value -0.0 put by one client reads back as -0.0 (the sign bit
// set), in lists and maps too, through another client of the queue: List,
// Lookup, and a field value -0.0 read by BatchGetByMeta of that Lookup.
func testTagNegativeZero(t *testing.T, e Engine) {
	ctx := context.Background()
	w, r := e.Open(t), e.Open(t)
	const p = "tags-negative-zero"
	neg := math.Copysign(0, -1)
	tag := tq.Tag{"f64": neg, "f32": float32(neg), "list": []any{neg, 0.0}, "map": map[string]any{"z": neg}, "zero": 0.0}
	if err := w.Put(ctx, p, "z", map[string]any{"v": neg}, tag); err != nil {
		t.Fatal(err)
	}
	signs := func(what string, got tq.Tag) {
		t.Helper()
		list, _ := got["list"].([]any)
		m, _ := got["map"].(map[string]any)
		vals := map[string]any{"f64": got["f64"], "f32": got["f32"], "map.z": m["z"]}
		if len(list) == 2 {
			vals["list[0]"] = list[0]
		}
		for name, v := range vals {
			if f, ok := v.(float64); !ok || f != 0 || !math.Signbit(f) {
				t.Errorf("%s: tag %s is %T %v (sign bit %v), want float64 -0", what, name, v, v, ok && math.Signbit(f))
			}
		}
		if len(list) != 2 {
			t.Errorf("%s: tag list is %#v", what, got["list"])
		} else if f, ok := list[1].(float64); !ok || f != 0 || math.Signbit(f) {
			t.Errorf("%s: tag list[1] is %T %v, want float64 +0", what, list[1], list[1])
		}
		if f, ok := got["zero"].(float64); !ok || f != 0 || math.Signbit(f) {
			t.Errorf("%s: tag zero is %T %v, want float64 +0", what, got["zero"], got["zero"])
		}
	}
	for name, c := range map[string]*tq.Client{"other client": r, "writer": w} {
		signs(name+" List", tagList(t, c, p)["z"].Tag)
		m, err := c.Lookup(ctx, p, []string{"z"})
		if err != nil {
			t.Fatal(err)
		}
		signs(name+" Lookup", m.Rows[0].Tag)
		b, err := c.BatchGetByMeta(ctx, m, "v")
		if err != nil {
			t.Fatal(err)
		}
		if v, ok := b["v"].Row(0).(float64); !ok || v != 0 || !math.Signbit(v) {
			t.Errorf("%s BatchGetByMeta: field v is %T %v, want float64 -0", name, b["v"].Row(0), b["v"].Row(0))
		}
	}
}
