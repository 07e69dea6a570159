package tq

import (
	"fmt"
	"slices"

	"github.com/tqgo/tqgo/codec"
)

// ColumnKind says how a column holds its rows.
type ColumnKind uint8

const (
	// KindStacked: one tensor whose leading dimension is the batch; row i is
	// a zero-copy view of slice i.
	KindStacked ColumnKind = iota + 1
	// KindJagged: one tensor per row, shapes free to differ (responses of
	// different lengths).
	KindJagged
	// KindValues: one general value per row (strings, numbers, lists, maps,
	// or tensors mixed with other values).
	KindValues
)

func (k ColumnKind) String() string {
	switch k {
	case KindStacked:
		return "stacked"
	case KindJagged:
		return "jagged"
	case KindValues:
		return "values"
	}
	return fmt.Sprintf("ColumnKind(%d)", uint8(k))
}

// Column is one field of a Batch. Build it with Stacked, StackedTensor,
// Jagged or Values; a constructor given bad input returns a Column that
// carries the error, and BatchPut reports it (as bufio.Writer does), so
// batches can be written as literals.
type Column struct {
	kind    ColumnKind
	stacked codec.Tensor
	tensors []codec.Tensor
	values  []any
	err     error
}

// StackedTensor is a column over t: row i is t's slice i along dimension 0.
func StackedTensor(t codec.Tensor) Column {
	if err := t.Validate(); err != nil {
		return Column{err: err}
	}
	if len(t.Shape) == 0 {
		return Column{err: fmt.Errorf("%w: a stacked column needs a leading batch dimension, got a 0-d tensor", codec.ErrShapeMismatch)}
	}
	return Column{kind: KindStacked, stacked: t}
}

// Stacked is a column over data, viewed without copying, with the given
// shape whose first dimension is the batch. With no shape, data is one
// scalar per row.
func Stacked[T codec.Element](data []T, shape ...int64) Column {
	t, err := codec.FromSlice(data, shape...)
	if err != nil {
		return Column{err: err}
	}
	return StackedTensor(t)
}

// rowError is a constructor's error about one row, so that BatchPut can
// name the row's key.
type rowError struct {
	row int
	err error
}

func (e *rowError) Error() string { return fmt.Sprintf("row %d: %v", e.row, e.err) }

func (e *rowError) Unwrap() error { return e.err }

// Jagged is a column of one tensor per row.
func Jagged(rows []codec.Tensor) Column {
	for i, t := range rows {
		if err := t.Validate(); err != nil {
			return Column{err: &rowError{row: i, err: err}}
		}
	}
	return Column{kind: KindJagged, tensors: rows}
}

// JaggedOf is a column of one 1-d tensor per row, each viewing a slice.
func JaggedOf[T codec.Element](rows [][]T) Column {
	ts := make([]codec.Tensor, len(rows))
	for i, r := range rows {
		t, err := codec.FromSlice(r)
		if err != nil {
			return Column{err: &rowError{row: i, err: err}}
		}
		ts[i] = t
	}
	return Column{kind: KindJagged, tensors: ts}
}

// Values is a column of general values, one per row (see package codec for
// the types allowed).
func Values(rows []any) Column { return Column{kind: KindValues, values: rows} }

// ValuesOf is a column of general values from a typed slice (strings, say).
func ValuesOf[T any](rows []T) Column {
	vs := make([]any, len(rows))
	for i, r := range rows {
		vs[i] = r
	}
	return Column{kind: KindValues, values: vs}
}

// Kind says how the column holds its rows.
func (c Column) Kind() ColumnKind { return c.kind }

// Err is the error a constructor recorded, if any.
func (c Column) Err() error { return c.err }

// Len is the number of rows.
func (c Column) Len() int {
	switch c.kind {
	case KindStacked:
		return int(c.stacked.Shape[0])
	case KindJagged:
		return len(c.tensors)
	}
	return len(c.values)
}

// Tensor is the stacked tensor of a KindStacked column.
func (c Column) Tensor() (codec.Tensor, bool) { return c.stacked, c.kind == KindStacked }

// Tensors returns every row as a tensor (zero-copy views for stacked and
// jagged columns). A values column whose rows are not all tensors gives
// codec.ErrUnsupportedType.
func (c Column) Tensors() ([]codec.Tensor, error) {
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
				return nil, fmt.Errorf("%w: row %d is a nil *codec.Tensor", codec.ErrUnsupportedType, i)
			}
			out[i] = *t
		default:
			return nil, fmt.Errorf("%w: row %d is %T, not a tensor", codec.ErrUnsupportedType, i, v)
		}
	}
	return out, nil
}

// Row returns row i: a codec.Tensor for tensor columns, the value otherwise.
func (c Column) Row(i int) any {
	switch c.kind {
	case KindStacked:
		t, _ := c.stacked.Row(i)
		return t
	case KindJagged:
		return c.tensors[i]
	}
	return c.values[i]
}

// rows views a stacked column's rows. A tensor that no longer validates
// (its caller changed its shape) gives zero tensors, as Row does.
func (c Column) rows() []codec.Tensor {
	rows, err := c.stacked.Rows()
	if err != nil {
		return make([]codec.Tensor, c.Len())
	}
	return rows
}

// appendCells appends the rows for the codec: tensors as *codec.Tensor
// into one slice per column, so a batch costs no allocation per cell.
func (c Column) appendCells(dst []any) []any {
	switch c.kind {
	case KindStacked:
		rows := c.rows()
		for i := range rows {
			dst = append(dst, &rows[i])
		}
	case KindJagged:
		for i := range c.tensors {
			dst = append(dst, &c.tensors[i])
		}
	default:
		dst = append(dst, c.values...)
	}
	return dst
}

// Values returns the rows as values (tensors as codec.Tensor).
func (c Column) Values() []any {
	if c.kind == KindValues {
		return c.values
	}
	out := make([]any, c.Len())
	for i := range out {
		out[i] = c.Row(i)
	}
	return out
}

// As views a tensor column's elements as one flat []T: zero-copy for an
// aligned stacked column; rows are concatenated for a jagged one.
func As[T codec.Element](c Column) ([]T, error) {
	if c.kind == KindStacked {
		return codec.View[T](c.stacked)
	}
	rows, err := RowsAs[T](c)
	if err != nil {
		return nil, err
	}
	return slices.Concat(rows...), nil
}

// RowsAs views each row of a tensor column as []T (zero-copy when aligned).
func RowsAs[T codec.Element](c Column) ([][]T, error) {
	ts, err := c.Tensors()
	if err != nil {
		return nil, err
	}
	out := make([][]T, len(ts))
	for i, t := range ts {
		if out[i], err = codec.View[T](t); err != nil {
			return nil, fmt.Errorf("row %d: %w", i, err)
		}
	}
	return out, nil
}

// Batch is a columnar batch: field name to column, every column with one
// row per key.
type Batch map[string]Column

// Fields returns the field names, sorted.
func (b Batch) Fields() []string {
	out := make([]string, 0, len(b))
	for f := range b {
		out = append(out, f)
	}
	slices.Sort(out)
	return out
}

// Len is the number of rows (of the first column; BatchPut checks they
// agree), 0 for an empty batch.
func (b Batch) Len() int {
	for _, c := range b {
		return c.Len()
	}
	return 0
}

// Tag is a row's small metadata map ({"step": 3, "status": "rewarded"}).
//
// Every engine holds the same set of tag values, and every client reads a
// value back with the same Go type and value, the writer included. Put and
// BatchPut store a value as it is normalised:
//
//   - nil, bool and string stay as they are;
//   - int, int8, int16, int32 and int64 become int64;
//   - uint, uint8, uint16, uint32 and uint64 become uint64 (signed and
//     unsigned stay apart: uint64(3) reads back as uint64, int(3) as int64);
//   - float32 and float64 become float64 (float32 converted exactly);
//     NaN is rejected, since it equals nothing, itself included; ±Inf is
//     accepted;
//   - []byte stays []byte (nil becomes empty);
//   - []any and any slice type of accepted elements ([]string, [][]int32,
//     []map[string]any ...) become []any of normalised elements (nil becomes
//     empty);
//   - map[string]any, Tag and any map type with string keys and accepted
//     elements (map[string]float64 ...) become map[string]any (nil becomes
//     empty).
//
// Lists and maps nest at most 32 deep (a list that contains itself is
// rejected as too deep). Everything else is rejected: pointers, structs,
// arrays, time.Time, complex numbers, uintptr, channels, funcs, errors,
// maps whose keys are not strings, and named types (a type Status string,
// time.Duration, a []Status), whose Go type no engine could give back.
//
// A rejected value fails the whole put with an error matching ErrInvalid,
// before anything is written; errors.As finds a *KeyError naming the row
// and a *TagError naming the tag key. The client stores a normalised deep
// copy, so the caller may modify or reuse its tags, their lists, maps and
// byte slices, as soon as the call returns. Tags read back (RowInfo.Tag)
// are the caller's maps, but nested lists, maps and byte slices in them
// may be shared with the store and other readers: treat them as read-only.
type Tag map[string]any
