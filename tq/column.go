package tq

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"

	"github.com/tqgo/tqgo/codec"
)

// check is the error every reader returns before reading: the
// constructor's, or ErrNoField for the zero Column.
func (c Column) check() error {
	if c.err != nil {
		return c.err
	}
	if c.kind == 0 {
		return fmt.Errorf("%w: zero Column (a field the batch does not have; Batch.Column names it)", ErrNoField)
	}
	return nil
}

// Row returns row i as a value, the same way for every kind: a
// codec.Tensor for a tensor row (for a stacked column, a view of the
// stacked tensor's slice i, no copy), the value itself otherwise (a
// *codec.Tensor in a values column as the codec.Tensor it points to, a nil
// one as nil). An i outside [0, Len) panics, as indexing a slice does; the
// zero Column has no rows. A stacked column whose tensor its caller made
// invalid gives a zero codec.Tensor.
func (c Column) Row(i int) any {
	if n := c.Len(); i < 0 || i >= n {
		panic(fmt.Sprintf("tq: Column.Row(%d) of a %d-row column", i, n))
	}
	switch c.kind {
	case KindStacked:
		t, _ := c.stacked.Row(i)
		return t
	case KindJagged:
		return c.tensors[i]
	}
	if t, ok := c.values[i].(*codec.Tensor); ok {
		if t == nil {
			return nil
		}
		return *t
	}
	return c.values[i]
}

// Values returns every row as Row(i) gives it. For a values column holding
// no *codec.Tensor it is the column's own slice (not copied).
func (c Column) Values() []any {
	if c.kind == KindValues && !slices.ContainsFunc(c.values, isTensorPtr) {
		return c.values
	}
	out := make([]any, c.Len())
	for i := range out {
		out[i] = c.Row(i)
	}
	return out
}

func isTensorPtr(v any) bool { _, ok := v.(*codec.Tensor); return ok }

// Tensors returns every row as a tensor, for stacked and jagged columns
// alike: for a stacked column views of the stacked tensor (no copy), for a
// jagged one the column's own tensors (not copied). A values column gives
// its rows when every row is a tensor; otherwise an error matching ErrType
// and codec.ErrUnsupportedType names the first row that is not. The zero
// Column gives ErrNoField.
func (c Column) Tensors() ([]codec.Tensor, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	switch c.kind {
	case KindJagged:
		return c.tensors, nil
	case KindStacked:
		return c.rows(), nil
	}
	out := make([]codec.Tensor, len(c.values))
	for i, v := range c.values {
		switch t := v.(type) {
		case codec.Tensor:
			out[i] = t
		case *codec.Tensor:
			if t == nil {
				return nil, fmt.Errorf("%w: %w: row %d is a nil *codec.Tensor", ErrType, codec.ErrUnsupportedType, i)
			}
			out[i] = *t
		default:
			return nil, fmt.Errorf("%w: %w: row %d is %T, not a tensor", ErrType, codec.ErrUnsupportedType, i, v)
		}
	}
	return out, nil
}

// Shape is the column's shape as ints: [Len, row shape...] when every row
// is a tensor and all rows have one shape (always so for a stacked column,
// whose tensor's shape it is; a jagged or values column whose rows happen
// to agree), nil otherwise, and nil for a column of no rows that is not
// stacked (it has no row shape to report). RowShape gives each row's.
func (c Column) Shape() []int {
	if c.kind == KindStacked {
		return shapeInt(c.stacked.Shape)
	}
	if c.Len() == 0 {
		return nil
	}
	ts, err := c.Tensors()
	if err != nil {
		return nil
	}
	for _, t := range ts[1:] {
		if !slices.Equal(t.Shape, ts[0].Shape) {
			return nil
		}
	}
	return append([]int{len(ts)}, shapeInt(ts[0].Shape)...)
}

// RowShape is row i's shape as ints: empty (not nil) for a 0-d tensor, nil
// for a row that is not a tensor. An i outside [0, Len) panics, as in Row.
func (c Column) RowShape(i int) []int {
	if t, ok := c.Row(i).(codec.Tensor); ok {
		return shapeInt(t.Shape)
	}
	return nil
}

// As returns the elements of every row of a tensor column as one flat
// []T, row after row: for a stacked column a view of its tensor (zero-copy
// when aligned, see codec.View), for a jagged one a copy of the rows
// concatenated. T must be the rows' dtype (ErrType and
// codec.ErrDTypeMismatch otherwise); the zero Column gives ErrNoField.
func As[T codec.Element](c Column) ([]T, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	if c.kind == KindStacked {
		v, err := codec.View[T](c.stacked)
		if err != nil {
			return nil, typeErr(err)
		}
		return v, nil
	}
	rows, err := RowsAs[T](c)
	if err != nil {
		return nil, err
	}
	return slices.Concat(rows...), nil
}

// RowsAs returns each row of a tensor column, stacked or jagged, as []T: a
// view of the row's bytes (zero-copy when aligned, see codec.View). Errors
// as for As, naming the row.
func RowsAs[T codec.Element](c Column) ([][]T, error) {
	ts, err := c.Tensors()
	if err != nil {
		return nil, err
	}
	out := make([][]T, len(ts))
	for i, t := range ts {
		if out[i], err = codec.View[T](t); err != nil {
			return nil, fmt.Errorf("row %d: %w", i, typeErr(err))
		}
	}
	return out, nil
}

// typeErr makes a dtype mismatch from codec.View match ErrType as well.
func typeErr(err error) error {
	if errors.Is(err, codec.ErrDTypeMismatch) {
		return fmt.Errorf("%w: %w", ErrType, err)
	}
	return err
}

// ValuesAs returns each row (as Row gives it) as a T. A row that is a T is
// taken as it is. A number is converted when T is a numeric type (named
// ones too) that holds it exactly: the codec decodes every signed integer
// as int64 and every unsigned one as uint64, so ValuesAs[int] reads them
// back, and a float64 3.0 reads as an int 3, but 300 is not an int8 and
// 0.1 not a float32. A string or bool becomes a named string or bool type.
// A nil row becomes the zero T when T's zero is nil (interface, pointer,
// slice, map). Anything else gives an error matching ErrType that names
// the row, its type and T; the zero Column gives ErrNoField. Tensor rows
// are codec.Tensor values, read with ValuesAs[codec.Tensor] or As/RowsAs.
func ValuesAs[T any](c Column) ([]T, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	out := make([]T, c.Len())
	for i := range out {
		v := c.Row(i)
		if x, ok := v.(T); ok {
			out[i] = x
			continue
		}
		if !convertValue(v, reflect.ValueOf(&out[i]).Elem()) {
			return nil, valueTypeError[T](i, v)
		}
	}
	return out, nil
}

func valueTypeError[T any](row int, v any) error {
	want := reflect.TypeFor[T]()
	switch x := v.(type) {
	case codec.Tensor:
		return fmt.Errorf("%w: row %d is a %s tensor of shape %v, not %v (read tensor rows with As or RowsAs)", ErrType, row, x.DType, x.Shape, want)
	case nil:
		return fmt.Errorf("%w: row %d is nil, not %v", ErrType, row, want)
	}
	if isNumber(reflect.ValueOf(v).Kind()) && isNumber(want.Kind()) {
		return fmt.Errorf("%w: row %d is %T %v, which %v cannot hold exactly", ErrType, row, v, v, want)
	}
	return fmt.Errorf("%w: row %d is %T, not %v", ErrType, row, v, want)
}

func isNumber(k reflect.Kind) bool {
	return k >= reflect.Int && k <= reflect.Float64
}

// convertValue sets dst to v converted without loss, reporting whether it
// could.
func convertValue(v any, dst reflect.Value) bool {
	if v == nil {
		switch dst.Kind() {
		case reflect.Interface, reflect.Pointer, reflect.Slice, reflect.Map:
			return true // dst is already its zero
		}
		return false
	}
	src := reflect.ValueOf(v)
	switch sk, dk := src.Kind(), dst.Kind(); {
	case sk == reflect.String && dk == reflect.String:
		dst.SetString(src.String())
		return true
	case sk == reflect.Bool && dk == reflect.Bool:
		dst.SetBool(src.Bool())
		return true
	case !isNumber(sk) || !isNumber(dk):
		return false
	}
	switch src.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return setInt(src.Int(), dst)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return setUint(src.Uint(), dst)
	}
	return setFloat(src.Float(), src.Kind() == reflect.Float32, dst)
}

func setInt(i int64, dst reflect.Value) bool {
	switch dst.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if dst.OverflowInt(i) {
			return false
		}
		dst.SetInt(i)
		return true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		if i < 0 {
			return false
		}
		return setUint(uint64(i), dst)
	}
	f := float64(i)
	if dst.Kind() == reflect.Float32 {
		f = float64(float32(i))
	}
	if f < -0x1p63 || f >= 0x1p63 || int64(f) != i {
		return false
	}
	dst.SetFloat(f)
	return true
}

func setUint(u uint64, dst reflect.Value) bool {
	switch dst.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if u > math.MaxInt64 {
			return false
		}
		return setInt(int64(u), dst)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		if dst.OverflowUint(u) {
			return false
		}
		dst.SetUint(u)
		return true
	}
	f := float64(u)
	if dst.Kind() == reflect.Float32 {
		f = float64(float32(u))
	}
	if f >= 0x1p64 || uint64(f) != u {
		return false
	}
	dst.SetFloat(f)
	return true
}

// setFloat: f is exact in a float32 when it came from one, converts back
// unchanged, or is NaN (which equals nothing, itself included).
func setFloat(f float64, from32 bool, dst reflect.Value) bool {
	switch dst.Kind() {
	case reflect.Float64:
		dst.SetFloat(f)
		return true
	case reflect.Float32:
		if !from32 && float64(float32(f)) != f && !math.IsNaN(f) {
			return false
		}
		dst.SetFloat(f)
		return true
	}
	if math.Trunc(f) != f { // NaN and fractions
		return false
	}
	switch dst.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if f < -0x1p63 || f >= 0x1p63 {
			return false
		}
		return setInt(int64(f), dst)
	}
	if f < 0 || f >= 0x1p64 {
		return false
	}
	return setUint(uint64(f), dst)
}

// columnOfRow is the one-row column Put stores for a field's value v:
//
//   - a codec.Tensor, or a non-nil *codec.Tensor, is a tensor cell;
//   - a slice of a tensor element type ([]float32, []int64, []bool,
//     []complex64 ...) is a 1-d tensor cell viewing the slice (no copy),
//     except []byte (= []uint8), which stays a bytes value as in package
//     codec; a []int becomes an int64 tensor (copied: int has no dtype);
//   - a [][]T of those element types but uint8 (or [][]int) whose inner slices share
//     one length is a 2-d tensor cell, copied; inner slices of different
//     lengths give a Column carrying an error matching
//     codec.ErrShapeMismatch, which BatchPut reports as ErrInvalid naming
//     the key;
//   - anything else (nil, a nil *codec.Tensor, numbers, strings, []byte,
//     []any, maps) is a general value, checked by the codec at encode.
func columnOfRow(v any) Column {
	switch x := v.(type) {
	case codec.Tensor:
		return Jagged([]codec.Tensor{x})
	case *codec.Tensor:
		if x == nil {
			return Values([]any{nil})
		}
		return Jagged([]codec.Tensor{*x})
	case []bool:
		return sliceRow(x)
	case []int8:
		return sliceRow(x)
	case []int16:
		return sliceRow(x)
	case []int32:
		return sliceRow(x)
	case []int64:
		return sliceRow(x)
	case []uint16:
		return sliceRow(x)
	case []uint32:
		return sliceRow(x)
	case []uint64:
		return sliceRow(x)
	case []float32:
		return sliceRow(x)
	case []float64:
		return sliceRow(x)
	case []complex64:
		return sliceRow(x)
	case []complex128:
		return sliceRow(x)
	case []int:
		return sliceRow(int64s(x))
	case [][]bool:
		return matrixRow(x)
	case [][]int8:
		return matrixRow(x)
	case [][]int16:
		return matrixRow(x)
	case [][]int32:
		return matrixRow(x)
	case [][]int64:
		return matrixRow(x)
	case [][]uint16:
		return matrixRow(x)
	case [][]uint32:
		return matrixRow(x)
	case [][]uint64:
		return matrixRow(x)
	case [][]float32:
		return matrixRow(x)
	case [][]float64:
		return matrixRow(x)
	case [][]complex64:
		return matrixRow(x)
	case [][]complex128:
		return matrixRow(x)
	case [][]int:
		rows := make([][]int64, len(x))
		for i, r := range x {
			rows[i] = int64s(r)
		}
		return matrixRow(rows)
	}
	return Values([]any{v})
}

// sliceRow is a one-row column of s as a 1-d tensor (a view of s).
func sliceRow[T codec.Element](s []T) Column {
	t, err := codec.FromSlice(s)
	if err != nil {
		return Column{err: &rowError{row: 0, err: err}}
	}
	return Column{kind: KindJagged, tensors: []codec.Tensor{t}}
}

// matrixRow is a one-row column of rows copied into a [len(rows), n]
// tensor; rows of different lengths are an error.
func matrixRow[T codec.Element](rows [][]T) Column {
	n := 0
	if len(rows) > 0 {
		n = len(rows[0])
	}
	data := make([]T, 0, len(rows)*n)
	for i, r := range rows {
		if len(r) != n {
			return Column{err: &rowError{row: 0, err: fmt.Errorf("%w: inner slice %d has %d elements, slice 0 has %d", codec.ErrShapeMismatch, i, len(r), n)}}
		}
		data = append(data, r...)
	}
	t, err := codec.FromSlice(data, int64(len(rows)), int64(n))
	if err != nil {
		return Column{err: &rowError{row: 0, err: err}}
	}
	return Column{kind: KindJagged, tensors: []codec.Tensor{t}}
}

// shapeInt is a codec shape as ints (a valid tensor's dimensions fit).
func shapeInt(s []int64) []int {
	out := make([]int, len(s))
	for i, d := range s {
		out[i] = int(d)
	}
	return out
}

// int64s is an int shape (or []int data) as codec wants it.
func int64s(s []int) []int64 {
	out := make([]int64, len(s))
	for i, d := range s {
		out[i] = int64(d)
	}
	return out
}
