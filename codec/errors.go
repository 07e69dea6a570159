package codec

import (
	"errors"
	"fmt"
)

// kindError is a sentinel that also matches a broader parent sentinel, so a
// caller can test for the exact failure (ErrTruncated) or its class
// (ErrCorrupt) with errors.Is.
type kindError struct {
	msg    string
	parent error
}

func (e *kindError) Error() string { return e.msg }

func (e *kindError) Is(target error) bool { return target == e.parent }

// Decoding errors. Every one of them also matches ErrCorrupt.
var (
	// ErrCorrupt is the class of every error caused by a malformed buffer.
	ErrCorrupt = errors.New("codec: corrupt buffer")
	// ErrTruncated: the buffer ends before its offset table or a payload does.
	ErrTruncated error = &kindError{"codec: truncated buffer", ErrCorrupt}
	// ErrOutOfRange: an offset or size in the table points outside the buffer
	// (or into the table), or the body references a tensor out of order.
	ErrOutOfRange error = &kindError{"codec: payload offset or size out of range", ErrCorrupt}
	// ErrCountTooLarge: the payload count does not fit in the buffer, exceeds
	// MaxTensors+1, or does not match the header's tensor count or the
	// number of tensors the body references.
	ErrCountTooLarge error = &kindError{"codec: payload count too large for buffer", ErrCorrupt}
)

// Value errors: raised when encoding a bad value, and when decoding a buffer
// that describes one (then they match ErrCorrupt as well).
var (
	// ErrUnknownDType: a dtype name or number that is not in the dtype table.
	ErrUnknownDType = errors.New("codec: unknown dtype")
	// ErrShapeMismatch: product(shape) × itemsize differs from the byte length.
	ErrShapeMismatch = errors.New("codec: shape does not match byte length")
	// ErrNegativeDim: a shape with a negative dimension.
	ErrNegativeDim = errors.New("codec: negative dimension")
	// ErrTooLarge: a payload of more than 4 GiB - 1 bytes, a packed object
	// whose offsets would not fit in 32 bits, or a limit of FORMAT.md
	// section 4 passed: a shape whose element count overflows, too many
	// dimensions or tensors (and Rows of more than MaxEmptyRows empty rows).
	ErrTooLarge = errors.New("codec: payload larger than 4 GiB - 1")
	// ErrUnsupportedType: a Go value the value model has no encoding for.
	ErrUnsupportedType = errors.New("codec: unsupported value type")
	// ErrTooDeep: a value nested deeper than MaxDepth (or a cyclic one).
	ErrTooDeep = errors.New("codec: value nested too deeply")
	// ErrDTypeMismatch: View asked for an element type the tensor is not.
	ErrDTypeMismatch = errors.New("codec: tensor dtype does not match element type")
	// ErrInvalidBool: a bool tensor holding a byte other than 0 or 1.
	ErrInvalidBool = errors.New("codec: bool tensor byte is not 0 or 1")
)

// Call errors: a caller's mistake on a valid tensor, not a bad buffer.
var (
	// ErrRowIndex: Row of an index outside the leading dimension.
	ErrRowIndex = errors.New("codec: row index out of range")
)

// Batch errors.
var (
	// ErrAlloc: the allocator failed, or returned too few or too small buffers.
	ErrAlloc = errors.New("codec: allocator returned unusable buffers")
	// ErrClosed: the Packer was used after Close.
	ErrClosed = errors.New("codec: packer closed")
)

// ObjectError reports which object of a batch failed, and why.
type ObjectError struct {
	Index int   // position in the batch
	Err   error // the cause; matches one of the sentinels above
}

func (e *ObjectError) Error() string { return fmt.Sprintf("codec: object %d: %v", e.Index, e.Err) }

func (e *ObjectError) Unwrap() error { return e.Err }

// corrupt wraps a value error found while decoding so that it also matches
// ErrCorrupt: a well-formed table carrying a bad dtype is still a bad buffer.
func corrupt(err error) error {
	if errors.Is(err, ErrCorrupt) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrCorrupt, err)
}
