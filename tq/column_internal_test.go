package tq

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/tqgo/tqgo/codec"
)

// columnOfRow: slices of tensor elements are 1-d tensor cells (views),
// rectangular [][]T 2-d ones, []byte and everything else values.
func TestColumnOfRow(t *testing.T) {
	f32 := []float32{1, 2, 3}
	col := columnOfRow(f32)
	if col.err != nil || col.kind != KindJagged || col.Len() != 1 {
		t.Fatalf("[]float32: %v %v %d", col.err, col.kind, col.Len())
	}
	if tt := col.tensors[0]; tt.DType != codec.Float32 || !slices.Equal(tt.Shape, []int64{3}) || !codec.Aliases(f32, tt) {
		t.Fatalf("[]float32 cell %s%v, aliases %v", tt.DType, tt.Shape, codec.Aliases(f32, tt))
	}
	for _, tc := range []struct {
		v     any
		dtype codec.DType
		shape []int64
	}{
		{[]int64{1, 2}, codec.Int64, []int64{2}},
		{[]bool{true}, codec.Bool, []int64{1}},
		{[]int{4, 5, 6}, codec.Int64, []int64{3}},
		{[]float64{}, codec.Float64, []int64{0}},
		{[][]float32{{1, 2, 3}, {4, 5, 6}}, codec.Float32, []int64{2, 3}},
		{[][]int{{1}, {2}}, codec.Int64, []int64{2, 1}},
		{codec.Scalar(int32(1)), codec.Int32, []int64{}},
	} {
		col := columnOfRow(tc.v)
		if col.err != nil || col.kind != KindJagged {
			t.Errorf("%T: %v %v, want a tensor cell", tc.v, col.err, col.kind)
			continue
		}
		if tt := col.tensors[0]; tt.DType != tc.dtype || !slices.Equal(tt.Shape, tc.shape) {
			t.Errorf("%T: %s%v, want %s%v", tc.v, tt.DType, tt.Shape, tc.dtype, tc.shape)
		}
	}
	if got, _ := RowsAs[int64](columnOfRow([][]int{{1, 2}, {3, 4}})); !reflect.DeepEqual(got, [][]int64{{1, 2, 3, 4}}) {
		t.Errorf("[][]int elements %v", got)
	}
	var nilTensor *codec.Tensor
	for _, v := range []any{[]byte("ab"), "s", int64(1), nil, nilTensor, map[string]any{"a": 1}, []any{1, "x"}, []string{"a"}} {
		col := columnOfRow(v)
		if col.err != nil || col.kind != KindValues || col.Len() != 1 {
			t.Errorf("%T: %v %v %d, want one value", v, col.err, col.kind, col.Len())
		}
	}
	if col := columnOfRow([][]float32{{1, 2}, {3}}); !errors.Is(col.err, codec.ErrShapeMismatch) {
		t.Errorf("ragged [][]float32: err %v, want ErrShapeMismatch", col.err)
	}
}

// A column from columnOfRow goes through BatchPut and reads back as what
// it was built from; a ragged one is ErrInvalid naming the key.
func TestColumnOfRowPut(t *testing.T) {
	ctx := context.Background()
	c, err := Open(ctx, "memory://")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b := Batch{"v": columnOfRow([]float32{0.5, 1.5}), "m": columnOfRow([][]int32{{1, 2}, {3, 4}}), "s": columnOfRow("hi")}
	if err := c.BatchPut(ctx, "p", []string{"k"}, b, nil); err != nil {
		t.Fatal(err)
	}
	got, err := c.BatchGet(ctx, "p", []string{"k"})
	if err != nil {
		t.Fatal(err)
	}
	if v, err := As[float32](got["v"]); err != nil || !slices.Equal(v, []float32{0.5, 1.5}) {
		t.Errorf("v = %v, %v", v, err)
	}
	if s := got["m"].Shape(); !slices.Equal(s, []int{1, 2, 2}) {
		t.Errorf("m shape %v", s)
	}
	if s, err := ValuesAs[string](got["s"]); err != nil || s[0] != "hi" {
		t.Errorf("s = %v, %v", s, err)
	}
	err = c.BatchPut(ctx, "p", []string{"k2"}, Batch{"r": columnOfRow([][]int64{{1}, {2, 3}})}, nil)
	var ke *KeyError
	if !errors.Is(err, ErrInvalid) || !errors.As(err, &ke) || ke.Key != "k2" {
		t.Errorf("ragged put: %v, want ErrInvalid naming k2", err)
	}
}
