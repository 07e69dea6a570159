package codec

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"unsafe"

	"github.com/tqgo/tqgo/internal/uninit"
)

// Tensor is an n-dimensional array as a byte view: a dtype, a shape and the
// row-major bytes. A 0-d tensor (a scalar) has an empty shape and one element.
//
// Data is not copied by the codec: a tensor built by FromSlice aliases the
// slice, and a decoded tensor aliases the buffer it was decoded from.
type Tensor struct {
	DType DType
	Shape []int64
	Data  []byte
}

// maxPayload is the largest payload the 32-bit offset table can describe.
const maxPayload = math.MaxUint32

// NumElements is the product of the shape (1 for a 0-d tensor), or an error
// for a negative dimension or when the product of the non-zero dimensions
// overflows int. A zero dimension makes the tensor empty but does not
// excuse the others: the rule does not depend on the order of the
// dimensions, so stacking rows of a valid shape, or slicing rows off one,
// cannot turn it invalid through a zero that moved.
func NumElements(shape []int64) (int, error) {
	n, empty := uint64(1), false
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("%w: shape %v", ErrNegativeDim, shape)
		}
		if d == 0 {
			empty = true
			continue
		}
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > math.MaxInt {
			return 0, fmt.Errorf("%w: shape %v has too many elements", ErrTooLarge, shape)
		}
		n = lo
	}
	if empty {
		return 0, nil
	}
	return int(n), nil
}

// Validate checks the dtype, the shape and that product(shape) × itemsize
// equals len(Data).
func (t Tensor) Validate() error {
	if !t.DType.Valid() {
		return fmt.Errorf("%w: %d", ErrUnknownDType, uint8(t.DType))
	}
	n, err := NumElements(t.Shape)
	if err != nil {
		return err
	}
	hi, want := bits.Mul64(uint64(n), uint64(t.DType.ItemSize()))
	if hi != 0 || want != uint64(len(t.Data)) {
		return fmt.Errorf("%w: %s%v needs %d×%d bytes, has %d", ErrShapeMismatch, t.DType, t.Shape, n, t.DType.ItemSize(), len(t.Data))
	}
	if want > maxPayload {
		return fmt.Errorf("%w: tensor of %d bytes", ErrTooLarge, want)
	}
	return nil
}

// ValidateBools checks that every byte of a bool tensor is 0 or 1
// (ErrInvalidBool); a tensor of another dtype passes. Validate does not
// check this, as it reads every byte; the encoder and the decoder do (see
// FORMAT.md), and so does View[bool].
func (t Tensor) ValidateBools() error {
	if t.DType == Bool && !validBools(t.Data) {
		return fmt.Errorf("%w: bool tensor %v", ErrInvalidBool, t.Shape)
	}
	return nil
}

// validBools reports whether every byte of b is 0 or 1, eight at a time.
func validBools(b []byte) bool {
	for len(b) >= 8 {
		if binary.LittleEndian.Uint64(b)&0xfefefefefefefefe != 0 {
			return false
		}
		b = b[8:]
	}
	for _, x := range b {
		if x > 1 {
			return false
		}
	}
	return true
}

// NewTensor builds a tensor over data (not copied) and validates it. Use it
// for dtypes Go has no element type for (float16, bfloat16, float8_*).
func NewTensor(dt DType, shape []int64, data []byte) (Tensor, error) {
	t := Tensor{DType: dt, Shape: shape, Data: data}
	if err := t.Validate(); err != nil {
		return Tensor{}, err
	}
	return t, nil
}

// Element is a Go type that is also a tensor dtype.
type Element interface {
	bool | uint8 | int8 | int16 | int32 | int64 | uint16 | uint32 | uint64 |
		float32 | float64 | complex64 | complex128
}

// DTypeOf is the dtype whose elements are T.
func DTypeOf[T Element]() DType {
	var z T
	switch any(z).(type) {
	case bool:
		return Bool
	case uint8:
		return Uint8
	case int8:
		return Int8
	case int16:
		return Int16
	case int32:
		return Int32
	case int64:
		return Int64
	case uint16:
		return Uint16
	case uint32:
		return Uint32
	case uint64:
		return Uint64
	case float32:
		return Float32
	case float64:
		return Float64
	case complex64:
		return Complex64
	default: // complex128: the constraint admits nothing else
		return Complex128
	}
}

// sliceBytes views s as bytes without copying.
func sliceBytes[T Element](s []T) []byte {
	if len(s) == 0 {
		return []byte{}
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(s[0])))
}

// FromSlice views s as a tensor without copying. With no shape the tensor is
// 1-d of len(s); otherwise product(shape) must equal len(s).
func FromSlice[T Element](s []T, shape ...int64) (Tensor, error) {
	if shape == nil {
		shape = []int64{int64(len(s))}
	}
	return NewTensor(DTypeOf[T](), shape, sliceBytes(s))
}

// Scalar is a 0-d tensor holding v.
func Scalar[T Element](v T) Tensor {
	return Tensor{DType: DTypeOf[T](), Shape: []int64{}, Data: sliceBytes([]T{v})}
}

// View returns the tensor's elements as []T. It aliases Data when Data is
// aligned for T and copies otherwise (a decoded buffer can place a payload at
// any address), so writes through the result reach Data only when aligned:
// use Aliases to tell. T must be the tensor's dtype (ErrDTypeMismatch); for
// bool, every byte must be 0 or 1 (ErrInvalidBool).
func View[T Element](t Tensor) ([]T, error) {
	if want := DTypeOf[T](); t.DType != want {
		return nil, fmt.Errorf("%w: tensor is %s, asked for %s", ErrDTypeMismatch, t.DType, want)
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	if err := t.ValidateBools(); err != nil {
		return nil, err
	}
	return viewBytes[T](t.Data), nil
}

// ViewAs reinterprets the tensor's bytes as []T when the element sizes
// agree: View for float16 or bfloat16 data as uint16, say. Bool is the
// exception both ways: a bool tensor views only as []bool (checked 0 or 1),
// and []bool views only a bool tensor.
func ViewAs[T Element](t Tensor) ([]T, error) {
	var z T
	if t.DType.ItemSize() != int(unsafe.Sizeof(z)) || t.DType == Bool && DTypeOf[T]() != Bool {
		return nil, fmt.Errorf("%w: %s is %d bytes, %T is %d", ErrDTypeMismatch, t.DType, t.DType.ItemSize(), z, unsafe.Sizeof(z))
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	if DTypeOf[T]() == Bool {
		return View[T](t)
	}
	return viewBytes[T](t.Data), nil
}

func viewBytes[T Element](b []byte) []T {
	var z T
	size := int(unsafe.Sizeof(z))
	n := len(b) / size
	if n == 0 {
		return []T{}
	}
	if uintptr(unsafe.Pointer(unsafe.SliceData(b)))%unsafe.Alignof(z) == 0 {
		return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), n)
	}
	out := make([]T, n)
	copy(sliceBytes(out), b)
	return out
}

// AlignedFor reports whether b starts where elements of itemSize bytes (a
// DType's ItemSize) can be viewed in place: at a multiple of the item size
// up to 8 bytes. That is what View needs for every dtype (complex64, whose
// parts are 4-byte floats, needs only 4); View copies otherwise.
func AlignedFor(b []byte, itemSize int) bool {
	align := uintptr(min(max(itemSize, 1), 8))
	return len(b) == 0 || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%align == 0
}

// Aliases reports whether a slice returned by View shares memory with t.Data.
func Aliases[T Element](view []T, t Tensor) bool {
	if len(view) == 0 || len(t.Data) == 0 {
		return false
	}
	return unsafe.Pointer(unsafe.SliceData(view)) == unsafe.Pointer(unsafe.SliceData(t.Data))
}

// RowBytes is the byte length of one row (leading-dimension slice) of t.
func (t Tensor) RowBytes() int {
	if len(t.Shape) == 0 {
		return 0
	}
	n, err := NumElements(t.Shape[1:])
	if err != nil {
		return 0
	}
	// Only a tensor with no rows (shape [0, ...]) gets here with rows too
	// large to address; it has no row to measure.
	hi, lo := bits.Mul64(uint64(n), uint64(t.DType.ItemSize()))
	if hi != 0 || lo > math.MaxInt {
		return 0
	}
	return int(lo)
}

// Row is row i of t along the leading dimension, as a zero-copy view.
func (t Tensor) Row(i int) (Tensor, error) {
	if len(t.Shape) == 0 {
		return Tensor{}, fmt.Errorf("%w: a 0-d tensor has no rows", ErrShapeMismatch)
	}
	if err := t.Validate(); err != nil {
		return Tensor{}, err // Data may be too short for the rows the shape claims
	}
	if i < 0 || int64(i) >= t.Shape[0] {
		return Tensor{}, fmt.Errorf("%w: row %d of %d", ErrRowIndex, i, t.Shape[0])
	}
	rb := t.RowBytes()
	return Tensor{DType: t.DType, Shape: t.Shape[1:len(t.Shape):len(t.Shape)], Data: t.Data[i*rb : (i+1)*rb : (i+1)*rb]}, nil
}

// MaxEmptyRows is the most rows Rows returns for a tensor whose rows hold
// no bytes (shape [n, 0, ...]): their number is not backed by any data, so
// a few bytes of input could otherwise ask for any number of them.
const MaxEmptyRows = 1 << 20

// Rows is every row of t along the leading dimension, Row(i) for each i,
// with t validated once rather than once per row. More than MaxEmptyRows
// rows of no bytes give ErrTooLarge.
func (t Tensor) Rows() ([]Tensor, error) {
	if len(t.Shape) == 0 {
		return nil, fmt.Errorf("%w: a 0-d tensor has no rows", ErrShapeMismatch)
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	rb := t.RowBytes()
	if rb == 0 && t.Shape[0] > MaxEmptyRows {
		return nil, fmt.Errorf("%w: %d rows of no bytes (at most %d)", ErrTooLarge, t.Shape[0], MaxEmptyRows)
	}
	shape := t.Shape[1:len(t.Shape):len(t.Shape)]
	out := make([]Tensor, t.Shape[0])
	for i := range out {
		out[i] = Tensor{DType: t.DType, Shape: shape, Data: t.Data[i*rb : (i+1)*rb : (i+1)*rb]}
	}
	return out, nil
}

// Stack copies rows of one dtype and shape into a tensor with a new leading
// dimension. Rows of different dtype or shape give ErrShapeMismatch.
func Stack(rows []Tensor) (Tensor, error) {
	if len(rows) == 0 {
		return Tensor{}, fmt.Errorf("%w: nothing to stack", ErrShapeMismatch)
	}
	first := rows[0]
	if err := first.Validate(); err != nil {
		return Tensor{}, err
	}
	for i, r := range rows[1:] {
		if !SameLayout(first, r) {
			return Tensor{}, fmt.Errorf("%w: row %d is %s%v, row 0 is %s%v", ErrShapeMismatch, i+1, r.DType, r.Shape, first.DType, first.Shape)
		}
	}
	rb := len(first.Data)
	data := uninit.Bytes(rb * len(rows)) // every byte is copied over below
	for i, r := range rows {
		copy(data[i*rb:], r.Data)
	}
	shape := append([]int64{int64(len(rows))}, first.Shape...)
	if _, err := NumElements(shape); err != nil {
		return Tensor{}, err // rows of no bytes, too many of them
	}
	return Tensor{DType: first.DType, Shape: shape, Data: data}, nil
}

// SameLayout reports whether a and b have the same dtype and shape.
func SameLayout(a, b Tensor) bool {
	if a.DType != b.DType || len(a.Shape) != len(b.Shape) || len(a.Data) != len(b.Data) {
		return false
	}
	for i := range a.Shape {
		if a.Shape[i] != b.Shape[i] {
			return false
		}
	}
	return true
}
