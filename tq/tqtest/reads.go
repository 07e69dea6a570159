package tqtest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/codec"
	"github.com/tqgo/tqgo/tq"
)

// readCases are the rules of reads that check cells against their rows'
// metadata.
func readCases() []testCase {
	return []testCase{
		{"Reads/AnotherDType", readAnotherDType},
		{"Reads/AnotherShape", readAnotherShape},
		{"Reads/ValueForTensor", readValueForTensor},
		{"Reads/TensorForValue", readTensorForValue},
		{"Reads/JaggedAnotherShape", readJaggedAnotherShape},
		{"Reads/StackedManyRowsOneTampered", readStackedManyRowsOneTampered},
		{"Reads/InvalidBoolCell", readInvalidBoolCell},
		{"Reads/UntamperedCellsRead", readUntamperedCellsRead},
		{"Puts/InvalidBoolRejected", putInvalidBoolRejected},
		{"Puts/ValidBoolRoundTrip", putValidBoolRoundTrip},
		{"Puts/ZeroDShape", putZeroDShape},
	}
}

// A 0-d tensor's shape reads back empty, not nil (nil is a general
// value's), through another client too, and a general value's nil.
func putZeroDShape(t *testing.T, e Engine) {
	c := e.Open(t)
	keys := keysN(2)
	mustPut(t, c, "p", keys, tq.Batch{"r": tq.Stacked([]float32{1, 2}), "v": tq.ValuesOf([]string{"a", "b"})})
	for _, cl := range []*tq.Client{c, e.Open(t)} {
		m := mustList(t, cl, "p")
		for _, r := range m.Rows {
			if fi := r.Fields["r"]; fi.Shape == nil || len(fi.Shape) != 0 || fi.DType != "float32" {
				t.Fatalf("row %q: a 0-d float32 reads back as %+v, want dtype float32, shape [] (not nil)", r.Key, fi)
			}
			if fi := r.Fields["v"]; fi.Shape != nil || fi.DType != "" {
				t.Fatalf("row %q: a general value reads back as %+v, want no dtype, shape nil", r.Key, fi)
			}
		}
	}
}

// keysN is "k0" … "k<n-1>".
func keysN(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
	}
	return keys
}

// mixedBatch is n rows of a stacked float32 [3] column "x", a jagged int64
// column "j" (row i has i%3+1 elements) and a values column "v" of
// strings.
func mixedBatch(n int) tq.Batch {
	x := make([]float32, 3*n)
	for i := range x {
		x[i] = float32(i)
	}
	j := make([][]int64, n)
	v := make([]string, n)
	for i := range n {
		j[i] = make([]int64, i%3+1)
		for e := range j[i] {
			j[i][e] = int64(100*i + e)
		}
		v[i] = fmt.Sprintf("row %d", i)
	}
	return tq.Batch{"x": tq.Stacked(x, n, 3), "j": tq.JaggedOf(j), "v": tq.ValuesOf(v)}
}

func mustPut(t *testing.T, c *tq.Client, partition string, keys []string, b tq.Batch) {
	t.Helper()
	if err := c.BatchPut(t.Context(), partition, keys, b, nil); err != nil {
		t.Fatal(err)
	}
}

func mustEncode(t *testing.T, v any) []byte {
	t.Helper()
	buf, err := codec.Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	return buf
}

func mustTensor[T codec.Element](t *testing.T, s []T, shape ...int64) codec.Tensor {
	t.Helper()
	x, err := codec.FromSlice(s, shape...)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// tamper replaces the stored cell of (key, field) with buf, under the
// storage key its row's metadata names, through the engine's data backend
// itself (the tag it reports must be the one the metadata holds, so that
// the client reads the cell back).
func tamper(t *testing.T, e Engine, partition, key, field string, buf []byte) {
	t.Helper()
	ctx := t.Context()
	rows, err := e.Meta.Lookup(ctx, partition, []string{key})
	if err != nil {
		t.Fatal(err)
	}
	if rows[0] == nil {
		t.Fatalf("tamper: no row %q in %q", key, partition)
	}
	fi, ok := rows[0].Fields[field]
	if !ok {
		t.Fatalf("tamper: row %q has no field %q", key, field)
	}
	cells := []backends.Cell{{Key: backends.StorageKey(rows[0].Index, field, fi.Gen), Body: buf}}
	if err := e.Data.Write(ctx, cells); err != nil {
		t.Fatal(err)
	}
	if cells[0].Tag != fi.BackendTag {
		t.Fatalf("tamper: the engine tagged the cell %q, its metadata says %q", cells[0].Tag, fi.BackendTag)
	}
}

// read is one way of reading fields of keys of a partition.
type read struct {
	name string
	get  func(t *testing.T, c *tq.Client) (tq.Batch, error)
}

// readsOf are every read of fields (none: all) of keys: BatchGet,
// BatchGetInto (into a batch of the same rows read before, so that its
// memory is taken), and BatchGetByMeta of a List and of a Lookup taken
// before the read.
func readsOf(partition string, keys []string, fields ...string) []read {
	return []read{
		{"BatchGet", func(t *testing.T, c *tq.Client) (tq.Batch, error) {
			return c.BatchGet(t.Context(), partition, keys, fields...)
		}},
		{"BatchGetInto", func(t *testing.T, c *tq.Client) (tq.Batch, error) {
			// Memory of x's size: the stacked columns of these tests are
			// float32 [3] (x) and smaller.
			into := tq.Batch{"x": tq.Stacked(make([]float32, 3*len(keys)), len(keys), 3)}
			return c.BatchGetInto(t.Context(), partition, keys, into, fields...)
		}},
		{"BatchGetByMeta(Lookup)", func(t *testing.T, c *tq.Client) (tq.Batch, error) {
			m, err := c.Lookup(t.Context(), partition, keys)
			if err != nil {
				return nil, err
			}
			return c.BatchGetByMeta(t.Context(), m, fields...)
		}},
		{"BatchGetByMeta(List)", func(t *testing.T, c *tq.Client) (tq.Batch, error) {
			m, err := c.List(t.Context(), partition)
			if err != nil {
				return nil, err
			}
			if len(m.Rows) != len(keys) {
				return nil, fmt.Errorf("List gave %d rows, the test wrote %d", len(m.Rows), len(keys))
			}
			return c.BatchGetByMeta(t.Context(), m, fields...)
		}},
	}
}

// wantCorrupt checks that every read of fields of keys fails with an error
// matching codec.ErrCorrupt, a *tq.KeyError naming partition, key and
// field: on the client that wrote the rows (which on some engines holds a
// copy of their metadata) and on a fresh one.
func wantCorrupt(t *testing.T, e Engine, writer *tq.Client, partition string, keys []string, key, field string, fields ...string) {
	t.Helper()
	clients := map[string]*tq.Client{"writer": writer, "fresh client": e.Open(t)}
	for who, c := range clients {
		for _, r := range readsOf(partition, keys, fields...) {
			b, err := r.get(t, c)
			var ke *tq.KeyError
			if !errors.Is(err, codec.ErrCorrupt) || !errors.As(err, &ke) ||
				ke.Partition != partition || ke.Key != key || ke.Field != field {
				t.Errorf("%s, %s of fields %q: batch of %d fields, error %v; want a *tq.KeyError for %s/%s/%s matching codec.ErrCorrupt",
					who, r.name, fields, len(b), err, partition, key, field)
			}
		}
	}
}

// A tensor cell rewritten as a tensor of another dtype (of the same byte
// length, so only its header tells) is corrupt.
func readAnotherDType(t *testing.T, e Engine) {
	c := e.Open(t)
	keys := keysN(4)
	mustPut(t, c, "p", keys, mixedBatch(4))
	tamper(t, e, "p", "k2", "x", mustEncode(t, mustTensor(t, []int32{7, 8, 9})))
	wantCorrupt(t, e, c, "p", keys, "k2", "x")
	wantCorrupt(t, e, c, "p", keys, "k2", "x", "x")
	wantCorrupt(t, e, c, "p", keys, "k2", "x", "v", "x")
}

// A tensor cell rewritten as a tensor of the metadata's dtype but another
// shape (and length) is corrupt; so is one of the same length and another
// shape.
func readAnotherShape(t *testing.T, e Engine) {
	c := e.Open(t)
	keys := keysN(4)
	mustPut(t, c, "p", keys, mixedBatch(4))
	tamper(t, e, "p", "k1", "x", mustEncode(t, mustTensor(t, []float32{1, 2, 3, 4})))
	wantCorrupt(t, e, c, "p", keys, "k1", "x")
	wantCorrupt(t, e, c, "p", keys, "k1", "x", "x")

	mustPut(t, c, "q", keys, mixedBatch(4))
	tamper(t, e, "q", "k3", "x", mustEncode(t, mustTensor(t, []float32{1, 2, 3}, 3, 1)))
	wantCorrupt(t, e, c, "q", keys, "k3", "x", "x", "j")
}

// A tensor cell rewritten as a general value is corrupt.
func readValueForTensor(t *testing.T, e Engine) {
	c := e.Open(t)
	keys := keysN(3)
	mustPut(t, c, "p", keys, mixedBatch(3))
	tamper(t, e, "p", "k0", "x", mustEncode(t, "not a tensor"))
	wantCorrupt(t, e, c, "p", keys, "k0", "x")
	wantCorrupt(t, e, c, "p", keys, "k0", "x", "x")

	mustPut(t, c, "q", keys, mixedBatch(3))
	tamper(t, e, "q", "k2", "j", mustEncode(t, []any{int64(1), int64(2)}))
	wantCorrupt(t, e, c, "q", keys, "k2", "j", "j")
}

// A cell the metadata says is a value, rewritten as a tensor, is corrupt:
// also when every row of the column is one (the column would otherwise
// read as a stacked tensor).
func readTensorForValue(t *testing.T, e Engine) {
	c := e.Open(t)
	keys := keysN(3)
	mustPut(t, c, "p", keys, mixedBatch(3))
	tamper(t, e, "p", "k1", "v", mustEncode(t, mustTensor(t, []int64{5})))
	wantCorrupt(t, e, c, "p", keys, "k1", "v")
	wantCorrupt(t, e, c, "p", keys, "k1", "v", "v")

	mustPut(t, c, "q", keys, mixedBatch(3))
	for _, k := range keys {
		tamper(t, e, "q", k, "v", mustEncode(t, mustTensor(t, []int64{5})))
	}
	wantCorrupt(t, e, c, "q", keys, "k0", "v", "v")
}

// A jagged column's cell rewritten with another row's shape is corrupt,
// although the column reads as a jagged one either way.
func readJaggedAnotherShape(t *testing.T, e Engine) {
	c := e.Open(t)
	keys := keysN(6)
	mustPut(t, c, "p", keys, mixedBatch(6))
	// Row 4 has 2 elements; row 0 has 1.
	tamper(t, e, "p", "k4", "j", mustEncode(t, mustTensor(t, []int64{9})))
	wantCorrupt(t, e, c, "p", keys, "k4", "j")
	wantCorrupt(t, e, c, "p", keys, "k4", "j", "j", "x")
}

// Reads of a stacked column of many rows (the engine's split read into
// the column, where it has one) where one row is tampered with: another
// dtype of the same length, another shape, a value, or bytes that do not
// decode.
func readStackedManyRowsOneTampered(t *testing.T, e Engine) {
	c := e.Open(t)
	const n = 300
	keys := keysN(n)
	tampered := map[string]struct {
		key string
		buf []byte
	}{
		"a": {"k17", mustEncode(t, mustTensor(t, []int32{1, 2, 3}))},
		"b": {"k150", mustEncode(t, mustTensor(t, []float32{1, 2}))},
		"c": {"k299", mustEncode(t, map[string]any{"x": int64(1)})},
		"d": {"k0", mustEncode(t, mustTensor(t, []float32{1, 2, 3}, 1, 3))},
	}
	for p, tc := range tampered {
		mustPut(t, c, p, keys, mixedBatch(n))
		tamper(t, e, p, tc.key, "x", tc.buf)
		wantCorrupt(t, e, c, p, keys, tc.key, "x", "x")
		wantCorrupt(t, e, c, p, keys, tc.key, "x")
	}
	// Garbage of the cell's own length: corrupt, however it is read.
	mustPut(t, c, "g", keys, mixedBatch(n))
	junk := mustEncode(t, mustTensor(t, []float32{1, 2, 3}))
	for i := range junk {
		junk[i] = 0xee
	}
	tamper(t, e, "g", "k42", "x", junk)
	wantCorrupt(t, e, c, "g", keys, "k42", "x", "x")
}

// boolCellWithByte is a packed bool tensor of shape [n] whose element i
// holds b: what no tq writer packs (the codec rejects it), made by packing
// a valid one and changing its bytes.
func boolCellWithByte(t *testing.T, n, i int, b byte) []byte {
	t.Helper()
	buf := mustEncode(t, mustTensor(t, make([]bool, n)))
	buf[len(buf)-n+i] = b // the tensor's bytes end the buffer
	return buf
}

// A stored bool tensor holding a byte other than 0 or 1 is corrupt when
// read, in a stacked column (split read) and in a jagged one.
func readInvalidBoolCell(t *testing.T, e Engine) {
	c := e.Open(t)
	const n = 40
	keys := keysN(n)
	masks := make([]bool, 4*n)
	for i := range masks {
		masks[i] = i%3 == 0
	}
	mustPut(t, c, "p", keys, tq.Batch{"m": tq.Stacked(masks, n, 4)})
	tamper(t, e, "p", "k9", "m", boolCellWithByte(t, 4, 2, 2))
	wantCorrupt(t, e, c, "p", keys, "k9", "m")

	jagged := make([][]bool, n)
	for i := range jagged {
		jagged[i] = make([]bool, i%5+1)
	}
	mustPut(t, c, "q", keys, tq.Batch{"m": tq.JaggedOf(jagged)})
	tamper(t, e, "q", "k13", "m", boolCellWithByte(t, 13%5+1, 0, 0x80))
	wantCorrupt(t, e, c, "q", keys, "k13", "m", "m")
}

// Checking cells against the metadata refuses nothing that is what the
// metadata says: a stacked, a jagged and a values column read back as
// written, also after a cell was rewritten with other bytes of the same
// dtype and shape (which no read can tell from a put's).
func readUntamperedCellsRead(t *testing.T, e Engine) {
	c := e.Open(t)
	const n = 50
	keys := keysN(n)
	mustPut(t, c, "p", keys, mixedBatch(n))
	tamper(t, e, "p", "k7", "x", mustEncode(t, mustTensor(t, []float32{-1, -2, -3})))
	for _, client := range []*tq.Client{c, e.Open(t)} {
		for _, r := range readsOf("p", keys) {
			b, err := r.get(t, client)
			if err != nil {
				t.Fatalf("%s: %v", r.name, err)
			}
			x, ok := b["x"].Tensor()
			if !ok {
				t.Fatalf("%s: x is %v, want stacked", r.name, b["x"].Kind())
			}
			xs, err := codec.View[float32](x)
			if err != nil {
				t.Fatal(err)
			}
			for i, got := range xs {
				want := float32(i)
				if i/3 == 7 {
					want = -float32(i%3 + 1)
				}
				if got != want {
					t.Fatalf("%s: x[%d] = %v, want %v", r.name, i, got, want)
				}
			}
			if k := b["j"].Kind(); k != tq.KindJagged {
				t.Fatalf("%s: j is %v, want jagged", r.name, k)
			}
			js, err := tq.RowsAs[int64](b["j"])
			if err != nil {
				t.Fatal(err)
			}
			for i, row := range js {
				if len(row) != i%3+1 || row[len(row)-1] != int64(100*i+len(row)-1) {
					t.Fatalf("%s: j row %d = %v", r.name, i, row)
				}
			}
			if k := b["v"].Kind(); k != tq.KindValues {
				t.Fatalf("%s: v is %v, want values", r.name, k)
			}
			for i, v := range b["v"].Values() {
				if v != fmt.Sprintf("row %d", i) {
					t.Fatalf("%s: v row %d = %#v", r.name, i, v)
				}
			}
		}
	}
}

// badBoolTensor is a bool tensor of shape [n] whose element i holds b.
func badBoolTensor(t *testing.T, n, i int, b byte) codec.Tensor {
	t.Helper()
	data := make([]byte, n)
	data[i] = b
	x, err := codec.NewTensor(codec.Bool, []int64{int64(n)}, data)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// BatchPut rejects a bool tensor holding a byte other than 0 or 1, in a
// stacked, a jagged or a values column, with ErrInvalid naming key and
// field, and writes nothing: a new row stays absent, an existing one keeps
// its fields.
func putInvalidBoolRejected(t *testing.T, e Engine) {
	ctx := t.Context()
	c := e.Open(t)
	keys := keysN(3)
	mustPut(t, c, "old", keys, tq.Batch{"m": tq.Stacked([]bool{true, false, true}, 3)})
	stackedData := make([]byte, 3*4)
	stackedData[2*4+1] = 3 // row 2
	stacked, err := codec.NewTensor(codec.Bool, []int64{3, 4}, stackedData)
	if err != nil {
		t.Fatal(err)
	}
	ok := mustTensor(t, []bool{true})
	cases := []struct {
		name string
		col  tq.Column
		key  string
	}{
		{"stacked", tq.StackedTensor(stacked), "k2"},
		{"jagged", tq.Jagged([]codec.Tensor{ok, badBoolTensor(t, 9, 8, 2), ok}), "k1"},
		{"values", tq.Values([]any{map[string]any{"mask": badBoolTensor(t, 2, 0, 0xff)}, "x", int64(1)}), "k0"},
		{"bare tensor in values", tq.Values([]any{"x", int64(1), badBoolTensor(t, 1, 0, 7)}), "k2"},
	}
	for _, tc := range cases {
		for _, p := range []string{"new", "old"} {
			err := c.BatchPut(ctx, p, keys, tq.Batch{"ok": tq.Stacked([]int64{1, 2, 3}), "m": tc.col}, nil)
			var ke *tq.KeyError
			if !errors.Is(err, tq.ErrInvalid) || !errors.Is(err, codec.ErrInvalidBool) || !errors.As(err, &ke) ||
				ke.Key != tc.key || ke.Field != "m" {
				t.Fatalf("%s into %s: %v, want ErrInvalid (codec.ErrInvalidBool) naming %s/m", tc.name, p, err, tc.key)
			}
		}
		rows, err := e.Meta.Lookup(ctx, "new", keys)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range rows {
			if r != nil {
				t.Fatalf("%s: row %s was written: %+v", tc.name, keys[i], r)
			}
		}
		b, err := c.BatchGet(ctx, "old", keys)
		if err != nil {
			t.Fatal(err)
		}
		if got := b.Fields(); len(got) != 1 || got[0] != "m" {
			t.Fatalf("%s: the old rows have fields %v, want [m]", tc.name, got)
		}
		if m, err := tq.As[bool](b["m"]); err != nil || len(m) != 3 || !m[0] || m[1] || !m[2] {
			t.Fatalf("%s: old m = %v, %v", tc.name, m, err)
		}
	}
	parts, err := c.Partitions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range parts {
		if p == "new" {
			t.Fatal("a rejected put made partition new")
		}
	}
}

// Bool tensors of 0 and 1 bytes are written and read back whole: a
// stacked column, and tensors nested in values.
func putValidBoolRoundTrip(t *testing.T, e Engine) {
	c := e.Open(t)
	const n = 20
	keys := keysN(n)
	masks := make([]bool, 9*n)
	vals := make([]any, n)
	for i := range masks {
		masks[i] = i%4 == 1
	}
	for i := range vals {
		vals[i] = map[string]any{"mask": mustTensor(t, []bool{i%2 == 0, true})}
	}
	mustPut(t, c, "p", keys, tq.Batch{"m": tq.Stacked(masks, n, 9), "v": tq.Values(vals)})
	for _, client := range []*tq.Client{c, e.Open(t)} {
		b, err := client.BatchGet(t.Context(), "p", keys)
		if err != nil {
			t.Fatal(err)
		}
		m, err := tq.As[bool](b["m"])
		if err != nil || len(m) != len(masks) {
			t.Fatalf("m: %d elements, %v", len(m), err)
		}
		for i := range m {
			if m[i] != masks[i] {
				t.Fatalf("m[%d] = %v, want %v", i, m[i], masks[i])
			}
		}
		for i, v := range b["v"].Values() {
			mask, err := codec.View[bool](v.(map[string]any)["mask"].(codec.Tensor))
			if err != nil || len(mask) != 2 || mask[0] != (i%2 == 0) || !mask[1] {
				t.Fatalf("v row %d: %v, %v", i, mask, err)
			}
		}
	}
}
