package tqtest

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/tq"
)

// fieldCases are the rules of changing some fields of existing rows: a
// BatchPut is an update (it merges), ClearFields removes fields.
func fieldCases() []testCase {
	return []testCase{
		{"UpdateMergesFieldsAndTags", fieldsUpdateMerges},
		{"ClearFieldsKeepsRows", fieldsClearKeepsRows},
		{"ClearFieldsInvalid", fieldsClearInvalid},
		{"ClearFieldsConsumption", fieldsClearConsumption},
	}
}

// fieldsRead reads fields of keys and fails the test on an error.
func fieldsRead(t *testing.T, c *tq.Client, partition string, keys []string, fields ...string) tq.Batch {
	t.Helper()
	b, err := c.BatchGet(t.Context(), partition, keys, fields...)
	if err != nil {
		t.Fatalf("BatchGet(%q, %q): %v", keys, fields, err)
	}
	return b
}

func fieldsValues(t *testing.T, b tq.Batch, field string) []any {
	t.Helper()
	col, ok := b[field]
	if !ok {
		t.Fatalf("field %q not read", field)
	}
	return col.Values()
}

// A BatchPut to existing rows is an update: the fields it names are
// replaced, the row's other fields stay as they were (values and
// metadata), the tag keys it names overwrite and the row's other tag keys
// stay, a nil tag leaves the tag alone, and new keys of the same put get
// rows. Another client sees the same.
func fieldsUpdateMerges(t *testing.T, e Engine) {
	c := e.Open(t)
	const p = "fields-update"
	keys := []string{"k0", "k1"}
	tagPut(t, c, p, keys, tq.Batch{
		"prompt": tq.Values([]any{"p0", "p1"}),
		"ids":    tq.Stacked([]int64{1, 2, 3, 4}, 2, 2),
	}, []tq.Tag{{"step": int64(1), "src": "a"}, {"step": int64(1)}})
	before := tagList(t, c, p)

	tagPut(t, c, p, []string{"k1", "k0", "k2"}, tq.Batch{
		"reward": tq.Values([]any{0.5, 1.5, 2.5}),
		"prompt": tq.Values([]any{"P1", "P0", "P2"}),
	}, []tq.Tag{{"step": int64(2), "scored": true}, nil, {"step": int64(2)}})

	for _, reader := range []*tq.Client{c, e.Open(t)} {
		b := fieldsRead(t, reader, p, []string{"k0", "k1"}, "prompt", "ids", "reward")
		if got := fieldsValues(t, b, "prompt"); !reflect.DeepEqual(got, []any{"P0", "P1"}) {
			t.Errorf("prompt after the update: %v, want it replaced", got)
		}
		if got, err := tq.As[int64](b["ids"]); err != nil || !slices.Equal(got, []int64{1, 2, 3, 4}) {
			t.Errorf("ids, a field the update did not name: %v, %v, want [1 2 3 4]", got, err)
		}
		if got := fieldsValues(t, b, "reward"); !reflect.DeepEqual(got, []any{1.5, 0.5}) {
			t.Errorf("reward, a field the update added: %v, want [1.5 0.5]", got)
		}
		rows := tagList(t, reader, p)
		if len(rows) != 3 {
			t.Fatalf("%d rows after an update with one new key, want 3", len(rows))
		}
		for _, k := range keys {
			if rows[k].Index != before[k].Index {
				t.Errorf("%s: index %d after the update, was %d", k, rows[k].Index, before[k].Index)
			}
			if !reflect.DeepEqual(rows[k].Fields["ids"], before[k].Fields["ids"]) {
				t.Errorf("%s: ids metadata %+v after the update, was %+v", k, rows[k].Fields["ids"], before[k].Fields["ids"])
			}
		}
		tagWant(t, "after the update", rows, map[string]tq.Tag{
			"k0": {"step": int64(1), "src": "a"}, // a nil tag: left alone
			"k1": {"step": int64(2), "scored": true},
			"k2": {"step": int64(2)},
		})
	}
}

// ClearFields removes the cells of the named fields from the rows: reads
// of them find them missing (ErrNotReady naming key and field), the other
// fields read as before, tags stay, a row left with no field stays, the
// cells are deleted from the engine and no garbage is left, unknown keys
// and fields a row lacks are ignored, and a put gives a field back.
func fieldsClearKeepsRows(t *testing.T, e Engine) {
	ctx := t.Context()
	c := e.Open(t)
	const p = "fields-clear"
	tagPut(t, c, p, []string{"k0", "k1", "k2"}, tq.Batch{
		"prompt":   tq.Values([]any{"p0", "p1", "p2"}),
		"response": tq.Stacked([]int64{1, 2, 3, 4, 5, 6}, 3, 2),
	}, []tq.Tag{{"step": int64(1)}, {"step": int64(2)}, nil})
	tagPut(t, c, p, []string{"solo"}, tq.Batch{"response": tq.Values([]any{"r"})}, []tq.Tag{{"only": "tag"}})
	rows, err := e.Meta.Lookup(ctx, p, []string{"k0", "k1", "solo"})
	if err != nil {
		t.Fatal(err)
	}
	var gone []backends.ReadCell // the cells ClearFields must delete
	for _, r := range rows {
		fi := r.Fields["response"]
		gone = append(gone, backends.ReadCell{Key: backends.StorageKey(r.Index, "response", fi.Gen), Tag: fi.BackendTag})
	}

	if err := c.ClearFields(ctx, p, []string{"k0", "unknown", "k1", "solo"}, "response", "no-such-field"); err != nil {
		t.Fatalf("ClearFields: %v", err)
	}
	for _, reader := range []*tq.Client{c, e.Open(t)} {
		for _, k := range []string{"k0", "k1", "solo"} {
			_, err := reader.BatchGet(ctx, p, []string{k}, "response")
			var ke *tq.KeyError
			if !errors.Is(err, tq.ErrNotReady) || !errors.As(err, &ke) || ke.Key != k || ke.Field != "response" {
				t.Errorf("BatchGet of %s's cleared field: %v, want ErrNotReady naming %s and response", k, err, k)
			}
		}
		b := fieldsRead(t, reader, p, []string{"k0", "k1", "k2"}, "prompt")
		if got := fieldsValues(t, b, "prompt"); !reflect.DeepEqual(got, []any{"p0", "p1", "p2"}) {
			t.Errorf("prompt, a field not cleared: %v", got)
		}
		b = fieldsRead(t, reader, p, []string{"k2"}, "response")
		if got, err := tq.As[int64](b["response"]); err != nil || !slices.Equal(got, []int64{5, 6}) {
			t.Errorf("k2's response, a row not named: %v, %v", got, err)
		}
		listed := tagList(t, reader, p)
		if len(listed) != 4 {
			t.Fatalf("%d rows listed after ClearFields, want every row (4)", len(listed))
		}
		for k, want := range map[string][]string{"k0": {"prompt"}, "k1": {"prompt"}, "k2": {"prompt", "response"}, "solo": {}} {
			var got []string
			for f := range listed[k].Fields {
				got = append(got, f)
			}
			slices.Sort(got)
			if !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
				t.Errorf("%s lists fields %q, want %q", k, got, want)
			}
		}
		tagWant(t, "after ClearFields", listed, map[string]tq.Tag{
			"k0": {"step": int64(1)}, "k1": {"step": int64(2)}, "k2": nil, "solo": {"only": "tag"},
		})
	}
	if err := e.Data.Read(ctx, gone); err != nil {
		t.Fatal(err)
	}
	for _, cell := range gone {
		if cell.Found {
			t.Errorf("cell %s of a cleared field is still stored", cell.Key)
		}
	}
	refs, err := e.Meta.Garbage(ctx, p, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) != 0 {
		t.Errorf("garbage after ClearFields: %v, want none (its cells deleted and swept)", refs)
	}
	// A put gives the field back.
	tagPut(t, c, p, []string{"solo"}, tq.Batch{"response": tq.Values([]any{"again"})}, nil)
	b := fieldsRead(t, e.Open(t), p, []string{"solo"}, "response")
	if got := fieldsValues(t, b, "response"); !reflect.DeepEqual(got, []any{"again"}) {
		t.Errorf("a cleared field put again reads %v", got)
	}
	// Clearing what is gone already, or from an unknown partition, is no error.
	if err := c.ClearFields(ctx, p, []string{"k0"}, "response"); err != nil {
		t.Errorf("ClearFields of a field already cleared: %v", err)
	}
	if err := c.ClearFields(ctx, "fields-clear-none", []string{"k0"}, "response"); err != nil {
		t.Errorf("ClearFields in an unknown partition: %v", err)
	}
}

// ClearFields validates everything before it changes anything: bad input
// fails with ErrInvalid and the rows stay as they were.
func fieldsClearInvalid(t *testing.T, e Engine) {
	c := e.Open(t)
	const p = "fields-invalid"
	tagPut(t, c, p, []string{"k0", "k1"}, tq.Batch{"a": tq.Values([]any{1, 2}), "b": tq.Values([]any{3, 4})}, nil)
	before := tagList(t, c, p)
	for name, call := range map[string]func(ctx context.Context) error{
		"no field":          func(ctx context.Context) error { return c.ClearFields(ctx, p, []string{"k0"}) },
		"a bad field name":  func(ctx context.Context) error { return c.ClearFields(ctx, p, []string{"k0"}, "a", "b@1") },
		"a field twice":     func(ctx context.Context) error { return c.ClearFields(ctx, p, []string{"k0"}, "a", "a") },
		"a key twice":       func(ctx context.Context) error { return c.ClearFields(ctx, p, []string{"k0", "k0"}, "a") },
		"an empty key":      func(ctx context.Context) error { return c.ClearFields(ctx, p, []string{"k1", ""}, "a") },
		"a bad partition":   func(ctx context.Context) error { return c.ClearFields(ctx, "bad partition", []string{"k0"}, "a") },
		"an empty field":    func(ctx context.Context) error { return c.ClearFields(ctx, p, []string{"k0"}, "") },
		"an empty partiton": func(ctx context.Context) error { return c.ClearFields(ctx, "", []string{"k0"}, "a") },
	} {
		if err := call(t.Context()); !errors.Is(err, tq.ErrInvalid) {
			t.Errorf("ClearFields with %s: %v, want ErrInvalid", name, err)
		}
	}
	if got := tagList(t, c, p); !reflect.DeepEqual(got, before) {
		t.Errorf("rejected ClearFields changed the rows: %v, was %v", got, before)
	}
}

// A row that loses a field a task needs stops being ready for it, and
// is ready again once a put brings the field back; a task that does not
// need the field still finds it; a leased row keeps its lease, and its
// Ack and Nack apply.
func fieldsClearConsumption(t *testing.T, e Engine) {
	ctx := t.Context()
	c := e.Open(t)
	const p = "fields-consume"
	keys := []string{"k0", "k1", "k2", "k3"}
	putRows(t, c, p, keys, nil, "a", "b")
	onA := mustTask(t, c, p, "on-a", []string{"a"})
	onB := mustTask(t, c, p, "on-b", []string{"b"})
	l := mustClaim(t, onA, 2)
	if got := l.Keys(); !slices.Equal(got, []string{"k0", "k1"}) {
		t.Fatalf("first claim leased %q, want k0 k1", got)
	}
	if err := e.Open(t).ClearFields(ctx, p, []string{"k0", "k1", "k2"}, "a"); err != nil {
		t.Fatalf("ClearFields: %v", err)
	}
	l2 := mustClaim(t, onA, 4)
	if got := l2.Keys(); !slices.Equal(got, []string{"k3"}) {
		t.Errorf("claim after k2 lost a: %q, want only k3", got)
	}
	if got := mustClaim(t, onB, 4).Keys(); !slices.Equal(got, keys) {
		t.Errorf("a task on b: %q, want every row", got)
	}
	if err := l.Ack(ctx, "k0"); err != nil {
		t.Errorf("Ack of a leased row that lost a field: %v", err)
	}
	if err := l.Nack(ctx, 0, "k1"); err != nil {
		t.Errorf("Nack of a leased row that lost a field: %v", err)
	}
	if got := mustClaim(t, onA, 4).Len(); got != 0 {
		t.Errorf("a claim while no row has a: leased %d rows, want 0", got)
	}
	putRows(t, c, p, []string{"k2", "k1", "k0"}, nil, "a")
	if got := mustClaim(t, onA, 4).Keys(); !slices.Equal(got, []string{"k1", "k2"}) {
		t.Errorf("claim once a is back: %q, want k1 (returned) and k2, not k0 (acked)", got)
	}
	st := mustStatus(t, onA)
	if st.Acked != 1 {
		t.Errorf("status after the Ack: %+v, want 1 acked", st)
	}
}
