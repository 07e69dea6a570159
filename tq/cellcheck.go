package tq

import (
	"fmt"
	"slices"

	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/codec"
)

// A read trusts a cell only when it is what its row's metadata says: a
// tensor of the metadata's dtype and shape, or a value that is not a
// tensor when the metadata's DType is "". Cells never change once
// committed (a rewrite goes to a new generation's key), so a cell that
// differs was damaged or replaced under tq's feet: the read fails with a
// *cellMismatchError rather than return a column that the metadata (and
// List) contradicts.

// cellSpec is what a row's metadata says one cell of a field holds.
type cellSpec struct {
	fi     metadata.FieldInfo
	tensor bool        // a tensor, not a general value
	known  bool        // dtype is fi.DType (false: a dtype this build lacks; no cell matches)
	dtype  codec.DType // when tensor
}

func specOf(fi metadata.FieldInfo) cellSpec {
	s := cellSpec{fi: fi, tensor: fi.DType != ""}
	if s.tensor {
		dt, err := codec.ParseDType(fi.DType)
		s.dtype, s.known = dt, err == nil
	}
	return s
}

// matchesTensor reports whether a tensor of dtype dt and shape is the cell
// s describes.
func (s *cellSpec) matchesTensor(dt codec.DType, shape []int64) bool {
	return s.tensor && s.known && s.dtype == dt && slices.Equal(s.fi.Shape, shape)
}

// matchesValue reports whether the decoded value v is the cell s describes.
func (s *cellSpec) matchesValue(v any) bool {
	if t, ok := v.(codec.Tensor); ok {
		return s.matchesTensor(t.DType, t.Shape)
	}
	return !s.tensor
}

// mismatch is the error of field f of row r: a cell described by got
// where the metadata says s.
func (s *cellSpec) mismatch(partition string, r *metadata.Row, f, got string) error {
	want := "a value"
	if s.tensor {
		want = describeTensorInfo(s.fi.DType, s.fi.Shape)
	}
	return &KeyError{Partition: partition, Key: r.Key, Field: f, Err: &cellMismatchError{got: got, want: want}}
}

func describeTensorInfo(dtype string, shape []int64) string {
	if shape == nil {
		shape = []int64{}
	}
	return fmt.Sprintf("a %s tensor of shape %v", dtype, shape)
}

func describeValue(v any) string {
	if t, ok := v.(codec.Tensor); ok {
		return describeTensorInfo(t.DType.String(), t.Shape)
	}
	return "a value"
}

// checkColumn checks each cell of col, field f of rows as decoded, against
// its row's metadata. Rows of one put share their Fields map, so the
// metadata is read once per map; a stacked column's cells share one dtype
// and shape, so it is compared once per map too. No allocation unless a
// cell differs.
func checkColumn(partition string, rows []*metadata.Row, f string, col Column) error {
	var (
		prev map[string]metadata.FieldInfo
		spec cellSpec
	)
	for i, r := range rows {
		changed := i == 0 || !metadata.SameMap(r.Fields, prev)
		if changed {
			prev = r.Fields
			spec = specOf(prev[f])
		}
		switch col.kind {
		case KindStacked:
			shape := col.stacked.Shape[1:]
			if changed && !spec.matchesTensor(col.stacked.DType, shape) {
				return spec.mismatch(partition, r, f, describeTensorInfo(col.stacked.DType.String(), shape))
			}
		case KindJagged:
			t := &col.tensors[i]
			if !spec.matchesTensor(t.DType, t.Shape) {
				return spec.mismatch(partition, r, f, describeValue(*t))
			}
		default:
			if !spec.matchesValue(col.values[i]) {
				return spec.mismatch(partition, r, f, describeValue(col.values[i]))
			}
		}
	}
	return nil
}
