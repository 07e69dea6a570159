package tqtest

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/tqgo/tqgo/codec"
	"github.com/tqgo/tqgo/tq"
)

// byMetaCases are the rules of BatchGetByMeta: it answers as BatchGet of
// the meta's keys and fields would now.
func byMetaCases() []testCase {
	return []testCase{
		{"ByMeta/Unchanged", byMetaUnchanged},
		{"ByMeta/ClearedPartition", byMetaClearedPartition},
		{"ByMeta/ClearedKeys", byMetaClearedKeys},
		{"ByMeta/ClearedKeysCellsLeft", byMetaClearedKeysCellsLeft},
		{"ByMeta/FieldAddedSince", byMetaFieldAddedSince},
		{"ByMeta/FieldAddedToSomeRowsSince", byMetaFieldAddedToSomeRowsSince},
		{"ByMeta/RowLacksField", byMetaRowLacksField},
		{"ByMeta/FieldReplacedSince", byMetaFieldReplacedSince},
		{"ByMeta/KeyRecreatedAfterClear", byMetaKeyRecreatedAfterClear},
	}
}

// byMetaBatch is n rows of a stacked float32 [2] column "x" and a values
// column "v", both telling step apart.
func byMetaBatch(step, n int) tq.Batch {
	x := make([]float32, 2*n)
	v := make([]string, n)
	for i := range n {
		x[2*i], x[2*i+1] = float32(step), float32(i)
		v[i] = fmt.Sprintf("step %d row %d", step, i)
	}
	return tq.Batch{"x": tq.Stacked(x, n, 2), "v": tq.ValuesOf(v)}
}

// changers are the clients a case changes the partition with after m was
// taken: the reading client itself, and another one (which, on engines
// that keep a copy of the metadata in each client, the reader's copy does
// not see until it asks).
func changers(t *testing.T, e Engine, reader *tq.Client) map[string]*tq.Client {
	return map[string]*tq.Client{"same client": reader, "other client": e.Open(t)}
}

// errClasses are the error classes a read's answer is compared by.
var errClasses = []error{tq.ErrNotFound, tq.ErrNotReady, tq.ErrInvalid, codec.ErrCorrupt}

// errClass is the class of err among errClasses (nil for nil, err itself
// for one of no class).
func errClass(err error) error {
	for _, c := range errClasses {
		if errors.Is(err, c) {
			return c
		}
	}
	return err
}

// keyOf is the key and field a *tq.KeyError names ("", "" without one).
func keyOf(err error) (key, field string) {
	var ke *tq.KeyError
	if errors.As(err, &ke) {
		return ke.Key, ke.Field
	}
	return "", ""
}

// sameAsBatchGet checks that BatchGetByMeta(m, fields...) answers as
// BatchGet of m's partition, keys and fields does: the same error class
// naming the same key and field, or the same batch. It returns that answer.
func sameAsBatchGet(t *testing.T, c *tq.Client, m *tq.BatchMeta, fields ...string) (tq.Batch, error) {
	t.Helper()
	got, gotErr := c.BatchGetByMeta(t.Context(), m, fields...)
	want, wantErr := c.BatchGet(t.Context(), m.Partition, m.Keys(), fields...)
	if errClass(gotErr) != errClass(wantErr) {
		t.Fatalf("BatchGetByMeta of fields %q: error %v; BatchGet: %v", fields, gotErr, wantErr)
	}
	if gk, gf := keyOf(gotErr); wantErr != nil {
		if wk, wf := keyOf(wantErr); gk != wk || gf != wf {
			t.Fatalf("BatchGetByMeta of fields %q: %v names %q/%q; BatchGet: %v", fields, gotErr, gk, gf, wantErr)
		}
		return nil, gotErr
	}
	if err := batchesEqual(got, want); err != nil {
		t.Fatalf("BatchGetByMeta of fields %q differs from BatchGet: %v", fields, err)
	}
	return got, nil
}

// batchesEqual reports how a and b differ: fields, column kinds, rows.
func batchesEqual(a, b tq.Batch) error {
	if !reflect.DeepEqual(a.Fields(), b.Fields()) {
		return fmt.Errorf("fields %v and %v", a.Fields(), b.Fields())
	}
	for _, f := range a.Fields() {
		ca, cb := a[f], b[f]
		if ca.Kind() != cb.Kind() || ca.Len() != cb.Len() {
			return fmt.Errorf("field %s: %v of %d rows and %v of %d", f, ca.Kind(), ca.Len(), cb.Kind(), cb.Len())
		}
		for i := range ca.Len() {
			if !cellsEqual(ca.Row(i), cb.Row(i)) {
				return fmt.Errorf("field %s row %d: %#v and %#v", f, i, ca.Row(i), cb.Row(i))
			}
		}
	}
	return nil
}

func cellsEqual(a, b any) bool {
	ta, okA := a.(codec.Tensor)
	tb, okB := b.(codec.Tensor)
	if okA || okB {
		return okA && okB && codec.SameLayout(ta, tb) && bytes.Equal(ta.Data, tb.Data)
	}
	return reflect.DeepEqual(a, b)
}

// wantStep checks that b holds byMetaBatch(step, n)'s x and v, of the
// rows of keys (rows are keys[i] = "k<i>").
func wantStep(t *testing.T, b tq.Batch, step int, keys []string) {
	t.Helper()
	x, err := tq.As[float32](b["x"])
	if err != nil || len(x) != 2*len(keys) {
		t.Fatalf("x: %d elements, %v; want %d", len(x), err, 2*len(keys))
	}
	vs := b["v"].Values()
	for i, k := range keys {
		var row int
		if _, err := fmt.Sscanf(k, "k%d", &row); err != nil {
			t.Fatal(err)
		}
		if x[2*i] != float32(step) || x[2*i+1] != float32(row) {
			t.Fatalf("x row %d (%s) = %v, want step %d row %d", i, k, x[2*i:2*i+2], step, row)
		}
		if want := fmt.Sprintf("step %d row %d", step, row); vs[i] != want {
			t.Fatalf("v row %d (%s) = %#v, want %q", i, k, vs[i], want)
		}
	}
}

func mustList(t *testing.T, c *tq.Client, partition string) *tq.BatchMeta {
	t.Helper()
	m, err := c.List(t.Context(), partition)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func mustLookup(t *testing.T, c *tq.Client, partition string, keys []string) *tq.BatchMeta {
	t.Helper()
	m, err := c.Lookup(t.Context(), partition, keys)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// wantErrOf checks err's class and the key and field it names.
func wantErrOf(t *testing.T, err, class error, key, field string) {
	t.Helper()
	if gk, gf := keyOf(err); !errors.Is(err, class) || gk != key || gf != field {
		t.Fatalf("error %v, want %v naming %q/%q", err, class, key, field)
	}
}

// A meta nothing changed since reads its rows, every field or those named,
// of a List and of a Lookup of some keys in another order.
func byMetaUnchanged(t *testing.T, e Engine) {
	c := e.Open(t)
	keys := keysN(40)
	mustPut(t, c, "p", keys, byMetaBatch(1, len(keys)))
	for _, client := range []*tq.Client{c, e.Open(t)} {
		m := mustList(t, client, "p")
		for _, fields := range [][]string{nil, {"x"}, {"v", "x"}} {
			b, err := sameAsBatchGet(t, client, m, fields...)
			if err != nil {
				t.Fatal(err)
			}
			if len(fields) != 1 {
				wantStep(t, b, 1, keys)
			}
		}
		sub := []string{"k31", "k2", "k17"}
		ms, err := client.Lookup(t.Context(), "p", sub)
		if err != nil {
			t.Fatal(err)
		}
		b, err := sameAsBatchGet(t, client, ms)
		if err != nil {
			t.Fatal(err)
		}
		wantStep(t, b, 1, sub)
	}
}

// Rows whose partition was cleared since the meta was taken are not
// found.
func byMetaClearedPartition(t *testing.T, e Engine) {
	c := e.Open(t)
	keys := keysN(8)
	for who, w := range changers(t, e, c) {
		t.Run(who, func(t *testing.T) {
			mustPut(t, c, "p", keys, byMetaBatch(1, len(keys)))
			m := mustList(t, c, "p")
			if err := w.ClearPartition(t.Context(), "p"); err != nil {
				t.Fatal(err)
			}
			for _, fields := range [][]string{nil, {"x"}, {"v"}} {
				_, err := sameAsBatchGet(t, c, m, fields...)
				wantErrOf(t, err, tq.ErrNotFound, "k0", "")
			}
			// Rows of a tag and no field: no cell to miss, still not
			// found.
			tagOnly(t, c, "t", keys)
			m = mustList(t, c, "t")
			if err := w.ClearPartition(t.Context(), "t"); err != nil {
				t.Fatal(err)
			}
			_, err := sameAsBatchGet(t, c, m)
			wantErrOf(t, err, tq.ErrNotFound, "k0", "")
		})
	}
}

// tagOnly writes rows of keys that have a tag and no field.
func tagOnly(t *testing.T, c *tq.Client, partition string, keys []string) {
	t.Helper()
	tags := make([]tq.Tag, len(keys))
	for i := range tags {
		tags[i] = tq.Tag{"status": "new"}
	}
	if err := c.BatchPut(t.Context(), partition, keys, tq.Batch{}, tags); err != nil {
		t.Fatal(err)
	}
}

// Keys cleared since the meta was taken are not found; the others still
// read through a meta of them alone.
func byMetaClearedKeys(t *testing.T, e Engine) {
	c := e.Open(t)
	keys := keysN(8)
	for who, w := range changers(t, e, c) {
		t.Run(who, func(t *testing.T) {
			mustPut(t, c, "p", keys, byMetaBatch(1, len(keys)))
			m := mustList(t, c, "p")
			kept := mustLookup(t, c, "p", []string{"k0", "k1", "k2", "k6", "k7"})
			if err := w.Clear(t.Context(), "p", []string{"k3", "k5"}); err != nil {
				t.Fatal(err)
			}
			for _, fields := range [][]string{nil, {"x"}, {"v", "x"}} {
				_, err := sameAsBatchGet(t, c, m, fields...)
				wantErrOf(t, err, tq.ErrNotFound, "k3", "")
			}
			b, err := sameAsBatchGet(t, c, kept)
			if err != nil {
				t.Fatal(err)
			}
			wantStep(t, b, 1, kept.Keys())

			tagOnly(t, c, "t", keys)
			m = mustList(t, c, "t")
			if err := w.Clear(t.Context(), "t", []string{"k6"}); err != nil {
				t.Fatal(err)
			}
			_, err = sameAsBatchGet(t, c, m)
			wantErrOf(t, err, tq.ErrNotFound, "k6", "")
		})
	}
}

// Keys whose rows are gone from the metadata while their cells are still
// stored (as between a Clear's two steps: metadata first, then data) are
// not found.
func byMetaClearedKeysCellsLeft(t *testing.T, e Engine) {
	c := e.Open(t)
	keys := keysN(5)
	mustPut(t, c, "p", keys, byMetaBatch(1, len(keys)))
	m := mustList(t, c, "p")
	if _, err := e.Meta.Delete(t.Context(), "p", []string{"k1"}); err != nil {
		t.Fatal(err)
	}
	for _, fields := range [][]string{nil, {"x"}, {"v"}} {
		_, err := sameAsBatchGet(t, c, m, fields...)
		wantErrOf(t, err, tq.ErrNotFound, "k1", "")
	}
}

// A field written to every row since the meta was taken is part of a read
// that names no fields, and can be named.
func byMetaFieldAddedSince(t *testing.T, e Engine) {
	c := e.Open(t)
	keys := keysN(8)
	for who, w := range changers(t, e, c) {
		t.Run(who, func(t *testing.T) {
			p := strings.ReplaceAll(who, " ", "-")
			mustPut(t, c, p, keys, byMetaBatch(1, len(keys)))
			m := mustList(t, c, p)
			r := make([]int64, len(keys))
			for i := range r {
				r[i] = int64(10 * i)
			}
			if err := w.BatchPut(t.Context(), p, keys, tq.Batch{"r": tq.Stacked(r)}, nil); err != nil {
				t.Fatal(err)
			}
			for _, fields := range [][]string{nil, {"r"}, {"r", "x"}} {
				b, err := sameAsBatchGet(t, c, m, fields...)
				if err != nil {
					t.Fatal(err)
				}
				got, err := tq.As[int64](b["r"])
				if err != nil || !reflect.DeepEqual(got, r) {
					t.Fatalf("fields %q: r = %v (%v), want %v", fields, got, err, r)
				}
				if fields == nil {
					if f := b.Fields(); !reflect.DeepEqual(f, []string{"r", "v", "x"}) {
						t.Fatalf("no-fields read gave fields %v, want [r v x]", f)
					}
					wantStep(t, b, 1, keys)
				}
			}
		})
	}
}

// A field written since to some of the meta's rows only: a read of every
// field is not ready (the other rows lack it), as BatchGet's is; a read of
// the fields every row has works, and so does one of the rows that have
// it.
func byMetaFieldAddedToSomeRowsSince(t *testing.T, e Engine) {
	c := e.Open(t)
	keys := keysN(6)
	for who, w := range changers(t, e, c) {
		t.Run(who, func(t *testing.T) {
			p := strings.ReplaceAll(who, " ", "-")
			mustPut(t, c, p, keys, byMetaBatch(1, len(keys)))
			m := mustList(t, c, p)
			first := mustLookup(t, c, p, keys[:2])
			if err := w.BatchPut(t.Context(), p, keys[:2], tq.Batch{"r": tq.ValuesOf([]string{"a", "b"})}, nil); err != nil {
				t.Fatal(err)
			}
			_, err := sameAsBatchGet(t, c, m)
			wantErrOf(t, err, tq.ErrNotReady, "k2", "r")
			_, err = sameAsBatchGet(t, c, m, "r")
			wantErrOf(t, err, tq.ErrNotReady, "k2", "r")
			b, err := sameAsBatchGet(t, c, m, "v", "x")
			if err != nil {
				t.Fatal(err)
			}
			wantStep(t, b, 1, keys)
			b, err = sameAsBatchGet(t, c, first)
			if err != nil {
				t.Fatal(err)
			}
			if got := b["r"].Values(); !reflect.DeepEqual(got, []any{"a", "b"}) {
				t.Fatalf("r of the first rows = %v", got)
			}
		})
	}
}

// Rows that differ in their fields when the meta is taken: a read of every
// field is not ready, as BatchGet's is.
func byMetaRowLacksField(t *testing.T, e Engine) {
	c := e.Open(t)
	keys := keysN(5)
	mustPut(t, c, "p", keys, byMetaBatch(1, len(keys)))
	if err := c.BatchPut(t.Context(), "p", []string{"k0", "k4"}, tq.Batch{"r": tq.Stacked([]float64{1, 2})}, nil); err != nil {
		t.Fatal(err)
	}
	m := mustList(t, c, "p")
	_, err := sameAsBatchGet(t, c, m)
	wantErrOf(t, err, tq.ErrNotReady, "k1", "r")
	b, err := sameAsBatchGet(t, c, m, "x", "v")
	if err != nil {
		t.Fatal(err)
	}
	wantStep(t, b, 1, keys)
}

// A field replaced since the meta was taken reads as it is now.
func byMetaFieldReplacedSince(t *testing.T, e Engine) {
	c := e.Open(t)
	keys := keysN(7)
	for who, w := range changers(t, e, c) {
		t.Run(who, func(t *testing.T) {
			p := strings.ReplaceAll(who, " ", "-")
			mustPut(t, c, p, keys, byMetaBatch(1, len(keys)))
			m := mustList(t, c, p)
			mustPut(t, w, p, keys, byMetaBatch(2, len(keys)))
			for _, fields := range [][]string{nil, {"x", "v"}} {
				b, err := sameAsBatchGet(t, c, m, fields...)
				if err != nil {
					t.Fatal(err)
				}
				wantStep(t, b, 2, keys)
			}
		})
	}
}

// Keys cleared and written again since the meta was taken are new rows
// (new global indexes): the read gives the new rows' data and fields.
func byMetaKeyRecreatedAfterClear(t *testing.T, e Engine) {
	c := e.Open(t)
	keys := keysN(6)
	for who, w := range changers(t, e, c) {
		t.Run(who, func(t *testing.T) {
			p := strings.ReplaceAll(who, " ", "-")
			mustPut(t, c, p, keys, byMetaBatch(1, len(keys)))
			m := mustList(t, c, p)
			one := mustLookup(t, c, p, keys[:1])
			if err := w.ClearPartition(t.Context(), p); err != nil {
				t.Fatal(err)
			}
			mustPut(t, w, p, keys, byMetaBatch(3, len(keys)))
			for _, fields := range [][]string{nil, {"x", "v"}} {
				b, err := sameAsBatchGet(t, c, m, fields...)
				if err != nil {
					t.Fatal(err)
				}
				wantStep(t, b, 3, keys)
			}
			// Made anew with other fields: the read is of the new row's.
			if err := w.Clear(t.Context(), p, keys[:1]); err != nil {
				t.Fatal(err)
			}
			if err := w.BatchPut(t.Context(), p, keys[:1], tq.Batch{"y": tq.ValuesOf([]int64{7})}, nil); err != nil {
				t.Fatal(err)
			}
			b, err := sameAsBatchGet(t, c, one)
			if err != nil {
				t.Fatal(err)
			}
			if f := b.Fields(); !reflect.DeepEqual(f, []string{"y"}) || b["y"].Row(0) != int64(7) {
				t.Fatalf("re-created row: fields %v, y %v; want only y = 7", f, b["y"].Row(0))
			}
			_, err = sameAsBatchGet(t, c, one, "x")
			wantErrOf(t, err, tq.ErrNotReady, "k0", "x")
		})
	}
}
