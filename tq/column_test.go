package tq_test

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/tqgo/tqgo/codec"
	"github.com/tqgo/tqgo/tq"
)

// A field the batch lacks is an error naming it and the fields there are,
// not an empty column.
func TestBatchColumnMissingField(t *testing.T) {
	b := tq.Batch{"rewards": tq.Stacked([]float32{1, 0}), "uid": tq.ValuesOf([]string{"a", "b"})}
	_, err := b.Column("reward")
	if !errors.Is(err, tq.ErrNoField) {
		t.Fatalf("Column(reward) = %v, want ErrNoField", err)
	}
	for _, s := range []string{`"reward"`, `"rewards"`, `"uid"`} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %s", err, s)
		}
	}
	c, err := b.Column("rewards")
	if err != nil || c.Kind() != tq.KindStacked || c.Len() != 2 {
		t.Fatalf("Column(rewards) = %v %d, %v", c.Kind(), c.Len(), err)
	}
}

// Every reader rejects the zero Column (b["typo"]) with ErrNoField, and a
// constructor's error with that error.
func TestReadersRejectZeroAndBadColumns(t *testing.T) {
	bad := tq.Stacked([]float32{1, 2, 3}, 2) // 3 elements, shape [2]
	if bad.Err() == nil {
		t.Fatal("Stacked with a wrong shape recorded no error")
	}
	for name, tc := range map[string]struct {
		col  tq.Column
		want error
	}{
		"zero": {tq.Batch{"x": tq.Stacked([]float32{1})}["typo"], tq.ErrNoField},
		"bad":  {bad, codec.ErrShapeMismatch},
	} {
		reads := map[string]error{}
		_, reads["As"] = tq.As[float32](tc.col)
		_, reads["RowsAs"] = tq.RowsAs[float32](tc.col)
		_, reads["ValuesAs"] = tq.ValuesAs[string](tc.col)
		_, reads["Tensors"] = tc.col.Tensors()
		for r, err := range reads {
			if !errors.Is(err, tc.want) {
				t.Errorf("%s column: %s = %v, want %v", name, r, err, tc.want)
			}
		}
	}
}

type reward float64

type status string

func TestValuesAs(t *testing.T) {
	ctx := t.Context()
	c, _ := memClient(t)
	keys := keysN("k", 3)
	mustPut(t, c, "p", keys, tq.Batch{
		"n":   tq.ValuesOf([]int{1, -2, 300}),
		"u":   tq.ValuesOf([]uint32{1, 2, math.MaxUint32}),
		"f":   tq.ValuesOf([]float64{3, 0.5, math.Inf(1)}),
		"s":   tq.ValuesOf([]string{"a", "b", "c"}),
		"mix": tq.Values([]any{"x", int64(1), nil}),
	}, nil)
	b, err := c.BatchGet(ctx, "p", keys)
	if err != nil {
		t.Fatal(err)
	}
	// The codec gives int64, uint64 and float64 back; ValuesAs converts
	// what converts exactly.
	if got, err := tq.ValuesAs[int](b["n"]); err != nil || !slices.Equal(got, []int{1, -2, 300}) {
		t.Errorf("ValuesAs[int](n) = %v, %v", got, err)
	}
	if got, err := tq.ValuesAs[float32](b["n"]); err != nil || !slices.Equal(got, []float32{1, -2, 300}) {
		t.Errorf("ValuesAs[float32](n) = %v, %v", got, err)
	}
	if got, err := tq.ValuesAs[uint32](b["u"]); err != nil || !slices.Equal(got, []uint32{1, 2, math.MaxUint32}) {
		t.Errorf("ValuesAs[uint32](u) = %v, %v", got, err)
	}
	if got, err := tq.ValuesAs[reward](b["f"]); err != nil || !slices.Equal(got, []reward{3, 0.5, reward(math.Inf(1))}) {
		t.Errorf("ValuesAs[reward](f) = %v, %v", got, err)
	}
	if got, err := tq.ValuesAs[status](b["s"]); err != nil || !slices.Equal(got, []status{"a", "b", "c"}) {
		t.Errorf("ValuesAs[status](s) = %v, %v", got, err)
	}
	if got, err := tq.ValuesAs[any](b["mix"]); err != nil || !reflect.DeepEqual(got, []any{"x", int64(1), nil}) {
		t.Errorf("ValuesAs[any](mix) = %v, %v", got, err)
	}
	for _, tc := range []struct {
		name string
		err  error
		row  string
	}{
		{"int8 of 300", only(tq.ValuesAs[int8](b["n"])), "row 2"},
		{"uint of -2", only(tq.ValuesAs[uint](b["n"])), "row 1"},
		{"int16 of MaxUint32", only(tq.ValuesAs[int16](b["u"])), "row 2"},
		{"int of 0.5", only(tq.ValuesAs[int](b["f"])), "row 1"},
		{"string of int", only(tq.ValuesAs[string](b["n"])), "row 0"},
		{"int of string", only(tq.ValuesAs[int64](b["mix"])), "row 0"},
	} {
		if !errors.Is(tc.err, tq.ErrType) || !strings.Contains(errText(tc.err), tc.row) {
			t.Errorf("%s: %v, want ErrType naming %s", tc.name, tc.err, tc.row)
		}
	}
}

func only[T any](_ T, err error) error { return err }

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// Conversions at the edges of exactness, on columns built locally (whose
// rows keep their Go types).
func TestValuesAsExactness(t *testing.T) {
	ok := func(name string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	fail := func(name string, err error) {
		t.Helper()
		if !errors.Is(err, tq.ErrType) {
			t.Errorf("%s: %v, want ErrType", name, err)
		}
	}
	col := func(vs ...any) tq.Column { return tq.Values(vs) }
	ok("int64 max as int64", only(tq.ValuesAs[int64](col(int64(math.MaxInt64)))))
	fail("int64 max as float64", only(tq.ValuesAs[float64](col(int64(math.MaxInt64)))))
	ok("2^53 as float64", only(tq.ValuesAs[float64](col(int64(1)<<53))))
	fail("2^53+1 as float64", only(tq.ValuesAs[float64](col(int64(1)<<53+1))))
	fail("2^24+1 as float32", only(tq.ValuesAs[float32](col(int64(1)<<24+1))))
	fail("uint64 max as int64", only(tq.ValuesAs[int64](col(uint64(math.MaxUint64)))))
	fail("uint64 max as float64", only(tq.ValuesAs[float64](col(uint64(math.MaxUint64)))))
	ok("float64 -3 as int8", only(tq.ValuesAs[int8](col(-3.0))))
	fail("float64 -3 as uint8", only(tq.ValuesAs[uint8](col(-3.0))))
	fail("float64 2^63 as int64", only(tq.ValuesAs[int64](col(0x1p63))))
	ok("float64 2^63 as uint64", only(tq.ValuesAs[uint64](col(0x1p63))))
	fail("NaN as int", only(tq.ValuesAs[int](col(math.NaN()))))
	fail("0.1 as float32", only(tq.ValuesAs[float32](col(0.1))))
	ok("float32 0.1 as float64", only(tq.ValuesAs[float64](col(float32(0.1)))))
	ok("NaN as float32", only(tq.ValuesAs[float32](col(math.NaN()))))
	fail("1e300 as float32", only(tq.ValuesAs[float32](col(1e300))))
	fail("true as int", only(tq.ValuesAs[int](col(true))))
	fail("nil as string", only(tq.ValuesAs[string](col(nil))))
	if got, err := tq.ValuesAs[[]byte](col(nil, []byte("ab"))); err != nil || got[0] != nil || string(got[1]) != "ab" {
		t.Errorf("ValuesAs[[]byte](nil, ab) = %q, %v", got, err)
	}
	if got, err := tq.ValuesAs[float32](col(float32(0.1))); err != nil || got[0] != float32(0.1) {
		t.Errorf("ValuesAs[float32](float32 0.1) = %v, %v", got, err)
	}
	// A tensor column's rows are tensors.
	ts, err := tq.ValuesAs[codec.Tensor](tq.Stacked([]int64{1, 2}))
	if err != nil || len(ts) != 2 || ts[1].DType != codec.Int64 {
		t.Errorf("ValuesAs[codec.Tensor](stacked) = %v, %v", ts, err)
	}
	err = only(tq.ValuesAs[int64](tq.Stacked([]int64{1, 2})))
	if !errors.Is(err, tq.ErrType) || !strings.Contains(err.Error(), "RowsAs") {
		t.Errorf("ValuesAs[int64](stacked) = %v, want ErrType pointing at As/RowsAs", err)
	}
}

// One rule decides stacked or jagged on read, and Tensors, RowsAs, Row and
// Shape read both alike.
func TestColumnKindRuleAndReaders(t *testing.T) {
	c, _ := memClient(t)
	keys := keysN("k", 3)
	mustPut(t, c, "p", keys, tq.Batch{
		"same":  tq.JaggedOf([][]int64{{1, 2}, {3, 4}, {5, 6}}),
		"ragg":  tq.JaggedOf([][]int64{{1, 2}, {3}, {4, 5, 6}}),
		"dtype": tq.Jagged([]codec.Tensor{codec.Scalar(int64(1)), codec.Scalar(int32(2)), codec.Scalar(int64(3))}),
		"mixed": tq.Values([]any{codec.Scalar(int64(1)), "two", int64(3)}),
	}, nil)
	b := mustGet(t, c, "p", keys)
	for f, want := range map[string]tq.ColumnKind{"same": tq.KindStacked, "ragg": tq.KindJagged, "dtype": tq.KindJagged, "mixed": tq.KindValues} {
		if got := b[f].Kind(); got != want {
			t.Errorf("%s reads %v, want %v", f, got, want)
		}
	}
	wantRows := map[string][][]int64{"same": {{1, 2}, {3, 4}, {5, 6}}, "ragg": {{1, 2}, {3}, {4, 5, 6}}}
	for f, want := range wantRows {
		col := b[f]
		rows, err := tq.RowsAs[int64](col)
		if err != nil || !reflect.DeepEqual(rows, want) {
			t.Errorf("RowsAs(%s) = %v, %v", f, rows, err)
		}
		ts, err := col.Tensors()
		if err != nil || len(ts) != 3 {
			t.Fatalf("Tensors(%s) = %v, %v", f, ts, err)
		}
		for i, tt := range ts {
			if r := col.Row(i).(codec.Tensor); &r.Data[0] != &tt.Data[0] {
				t.Errorf("%s row %d: Row and Tensors disagree", f, i)
			}
		}
		if st, ok := col.Tensor(); ok {
			for i, tt := range ts {
				if &tt.Data[0] != &st.Data[i*16] {
					t.Errorf("stacked Tensors()[%d] is not a view", i)
				}
			}
		}
		flat, err := tq.As[int64](col)
		if err != nil || !slices.Equal(flat, slices.Concat(want...)) {
			t.Errorf("As(%s) = %v, %v", f, flat, err)
		}
	}
	if _, err := tq.RowsAs[int64](b["dtype"]); !errors.Is(err, tq.ErrType) || !errors.Is(err, codec.ErrDTypeMismatch) || !strings.Contains(err.Error(), "row 1") {
		t.Errorf("RowsAs[int64](dtype) = %v, want ErrType at row 1", err)
	}
	if _, err := tq.As[float32](b["same"]); !errors.Is(err, tq.ErrType) {
		t.Errorf("As[float32] of int64 rows = %v, want ErrType", err)
	}
	if _, err := b["mixed"].Tensors(); !errors.Is(err, tq.ErrType) || !strings.Contains(err.Error(), "row 1") {
		t.Errorf("Tensors(mixed) = %v, want ErrType at row 1", err)
	}

	// Shapes, as ints.
	for f, want := range map[string][]int{"same": {3, 2}, "ragg": nil, "dtype": {3}, "mixed": nil} {
		if got := b[f].Shape(); !slices.Equal(got, want) || (got == nil) != (want == nil) {
			t.Errorf("Shape(%s) = %v, want %v", f, got, want)
		}
	}
	if got := b["ragg"].RowShape(2); !slices.Equal(got, []int{3}) {
		t.Errorf("RowShape(ragg, 2) = %v", got)
	}
	if got := b["dtype"].RowShape(0); got == nil || len(got) != 0 {
		t.Errorf("RowShape of a 0-d row = %#v, want empty", got)
	}
	if got := b["mixed"].RowShape(1); got != nil {
		t.Errorf("RowShape of a string row = %v, want nil", got)
	}
	if got := tq.Stacked(make([]float32, 0), 0, 4).Shape(); !slices.Equal(got, []int{0, 4}) {
		t.Errorf("Shape of an empty stacked column = %v", got)
	}
	m, err := c.List(t.Context(), "p")
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Rows[2].Fields["ragg"].Shape; !slices.Equal(got, []int{3}) {
		t.Errorf("FieldInfo.Shape = %v, want [3]", got)
	}
}

// Row gives one kind of answer for every kind of column, and panics out of
// range as a slice does.
func TestColumnRow(t *testing.T) {
	one := codec.Scalar(int64(7))
	n := 2
	for name, tc := range map[string]struct {
		col  tq.Column
		want []any
	}{
		"stacked": {tq.Stacked([]int64{1, 2, 3, 4}, n, 2), []any{"tensor [2]", "tensor [2]"}},
		"jagged":  {tq.JaggedOf([][]int64{{1}, {2, 3}}), []any{"tensor [1]", "tensor [2]"}},
		"values":  {tq.Values([]any{"a", &one}), []any{"a", "tensor []"}},
	} {
		for i, want := range tc.want {
			got := tc.col.Row(i)
			if tt, ok := got.(codec.Tensor); ok {
				got = fmt.Sprintf("tensor %v", tt.Shape)
			}
			if got != want {
				t.Errorf("%s Row(%d) = %v, want %v", name, i, got, want)
			}
			if !reflect.DeepEqual(tc.col.Values()[i], tc.col.Row(i)) {
				t.Errorf("%s Values()[%d] differs from Row", name, i)
			}
		}
		for _, i := range []int{-1, tc.col.Len()} {
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("%s Row(%d) did not panic", name, i)
					}
				}()
				tc.col.Row(i)
			}()
		}
	}
	if v, _ := tq.RowsAs[int64](tq.Stacked([]int64{1, 2, 3, 4}, n, 2)); !reflect.DeepEqual(v, [][]int64{{1, 2}, {3, 4}}) {
		t.Errorf("Stacked with int shape: rows %v", v)
	}
}
