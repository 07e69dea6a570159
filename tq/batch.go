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

// Column is one field of a Batch: a column of rows, one per key. Build it
// with Stacked, StackedTensor, Jagged, JaggedOf, Values or ValuesOf; a
// constructor given bad input returns a Column that carries the error, and
// BatchPut reports it (as bufio.Writer does), so batches can be written as
// literals.
//
// A column read back (BatchGet and friends) is, by one rule:
//
//   - KindStacked when every row is a tensor and all have one dtype and one
//     shape: one tensor whose leading dimension is the batch;
//   - KindJagged when every row is a tensor but dtypes or shapes differ;
//   - KindValues when some row is not a tensor.
//
// So a tensor field reads stacked or jagged depending on the rows asked for
// (responses of one length stack, of different lengths do not). Readers
// that work for both: Tensors and Row give per-row tensors (views of the
// stacked tensor, no copy), RowsAs gives per-row []T, As the elements of
// every row as one []T, Shape the [rows, ...] shape when the rows share
// one. ValuesAs reads a values column as []T.
//
// The zero Column is what indexing a Batch by a field it lacks gives. It
// has no rows, and every reader that returns an error returns one matching
// ErrNoField for it, so a misspelled field fails rather than reading as
// empty; Batch.Column reports a missing field directly.
//
// A Column is a value holding slices; its readers do not modify it, so it
// is safe for concurrent reads.
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
// shape whose first dimension is the batch (Stacked(ids, n, seqLen)). With
// no shape, data is one scalar per row. A negative dimension, or a shape
// whose product is not len(data), gives a Column carrying the error.
func Stacked[T codec.Element](data []T, shape ...int) Column {
	var sh []int64
	if shape != nil {
		sh = int64s(shape)
	}
	t, err := codec.FromSlice(data, sh...)
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

// JaggedOf is a column of one 1-d tensor per row, each viewing a slice
// (no copy), lengths free to differ.
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

// Kind says how the column holds its rows (0 for the zero Column).
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

// Batch is a columnar batch: field name to column, every column with one
// row per key.
type Batch map[string]Column

// Column returns the column of field, or an error matching ErrNoField that
// names the field and lists the batch's fields. Indexing the map
// (b["rewards"]) gives the zero Column for a missing field instead, which
// every reader rejects with ErrNoField.
func (b Batch) Column(field string) (Column, error) {
	c, ok := b[field]
	if !ok {
		return Column{}, fmt.Errorf("%w: %q (the batch has %q)", ErrNoField, field, b.Fields())
	}
	return c, nil
}

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
