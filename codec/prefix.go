package codec

import (
	"encoding/binary"
	"fmt"
)

// TensorPrefix returns what Encode writes before the data of one bare
// tensor of dtype dt and shape: the packed buffer of such a tensor is
// exactly the prefix followed by the tensor's bytes, and dataLen is how
// many those are. A reader that knows a cell's dtype and shape can so read
// the data straight into its place in a larger buffer (a stacked column)
// and check the rest of the cell by comparing it with the prefix: equal
// bytes decode to exactly that tensor.
func TensorPrefix(dt DType, shape []int64) (prefix []byte, dataLen int, err error) {
	n, err := NumElements(shape)
	if err != nil {
		return nil, 0, err
	}
	if !dt.Valid() {
		return nil, 0, fmt.Errorf("%w: dtype %d", ErrUnknownDType, dt)
	}
	if n > maxPayload/dt.ItemSize() {
		return nil, 0, fmt.Errorf("%w: tensor of %d elements", ErrTooLarge, n)
	}
	if len(shape) > maxDims {
		return nil, 0, fmt.Errorf("%w: %d dimensions, at most %d", ErrTooLarge, len(shape), maxDims)
	}
	t := Tensor{DType: dt, Shape: shape}
	head := appendSingleHeader(make([]byte, tensorTableEnd, tensorTableEnd+32+9*len(shape)), &t)
	headLen := len(head) - tensorTableEnd
	off := align(len(head))
	dataLen = n * dt.ItemSize()
	if uint64(off)+uint64(dataLen) > maxPayload {
		return nil, 0, fmt.Errorf("%w: packed object of more than %d bytes", ErrTooLarge, uint64(maxPayload))
	}
	prefix = append(head, make([]byte, off-len(head))...)
	binary.LittleEndian.PutUint32(prefix, 2)
	binary.LittleEndian.PutUint32(prefix[4:], tensorTableEnd)
	binary.LittleEndian.PutUint32(prefix[8:], uint32(headLen))
	binary.LittleEndian.PutUint32(prefix[12:], uint32(off))
	binary.LittleEndian.PutUint32(prefix[16:], uint32(dataLen))
	return prefix, dataLen, nil
}

// tensorTableEnd is where the offset table of a packed bare tensor ends: it
// has two payloads, payload 0 and the tensor's bytes.
const tensorTableEnd = 4 + 8*2
