package codec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/tinylib/msgp/msgp"
)

// MaxDepth is how deeply lists and maps may nest. It bounds the decoder's
// recursion on hostile input and stops the encoder on a cyclic value.
const MaxDepth = 64

// tensorExt is the MessagePack extension type of a tensor reference in the
// body: a fixext4 carrying the big-endian u32 index of the tensor in the
// header (payload index - 1). msgp reserves 3, 4, 5 and -1.
const tensorExt = 17

// bodyEncoder appends one value's body and collects its tensors.
type bodyEncoder struct {
	tensors []Tensor // tensors in reference order
	body    []byte   // scratch for the body
	keys    []string // scratch for sorting map keys, used as a stack
}

func (e *bodyEncoder) appendValue(b []byte, v any, depth int) ([]byte, error) {
	if depth > MaxDepth {
		return b, ErrTooDeep
	}
	switch x := v.(type) {
	case nil:
		return msgp.AppendNil(b), nil
	case Tensor:
		return e.appendTensor(b, x)
	case *Tensor:
		if x == nil {
			return msgp.AppendNil(b), nil
		}
		return e.appendTensor(b, *x)
	case bool:
		return msgp.AppendBool(b, x), nil
	case int:
		return msgp.AppendInt64(b, int64(x)), nil
	case int8:
		return msgp.AppendInt64(b, int64(x)), nil
	case int16:
		return msgp.AppendInt64(b, int64(x)), nil
	case int32:
		return msgp.AppendInt64(b, int64(x)), nil
	case int64:
		return msgp.AppendInt64(b, x), nil
	case uint:
		return appendUint(b, uint64(x)), nil
	case uint8:
		return appendUint(b, uint64(x)), nil
	case uint16:
		return appendUint(b, uint64(x)), nil
	case uint32:
		return appendUint(b, uint64(x)), nil
	case uint64:
		return appendUint(b, x), nil
	case uintptr:
		return appendUint(b, uint64(x)), nil
	case float32:
		return msgp.AppendFloat32(b, x), nil
	case float64:
		return msgp.AppendFloat64(b, x), nil
	case string:
		if uint64(len(x)) > maxPayload {
			return b, fmt.Errorf("%w: string of %d bytes", ErrTooLarge, len(x))
		}
		return msgp.AppendString(b, x), nil
	case []byte:
		if x == nil {
			return msgp.AppendNil(b), nil
		}
		if uint64(len(x)) > maxPayload {
			return b, fmt.Errorf("%w: []byte of %d bytes", ErrTooLarge, len(x))
		}
		return msgp.AppendBytes(b, x), nil
	case []any:
		if x == nil {
			return msgp.AppendNil(b), nil
		}
		b = msgp.AppendArrayHeader(b, uint32(len(x)))
		var err error
		for _, el := range x {
			if b, err = e.appendValue(b, el, depth+1); err != nil {
				return b, err
			}
		}
		return b, nil
	case map[string]any:
		if x == nil {
			return msgp.AppendNil(b), nil
		}
		// Sorted keys make the encoding deterministic: equal values give
		// equal bytes, whichever path packed them. The keys go on a stack
		// shared by the nested maps; index it afresh after each recursion,
		// which may have grown (moved) it.
		base := len(e.keys)
		for k := range x {
			if uint64(len(k)) > maxPayload {
				return b, fmt.Errorf("%w: map key of %d bytes", ErrTooLarge, len(k))
			}
			e.keys = append(e.keys, k)
		}
		slices.Sort(e.keys[base:])
		b = msgp.AppendMapHeader(b, uint32(len(x)))
		var err error
		for i := base; i < base+len(x); i++ {
			k := e.keys[i]
			b = msgp.AppendString(b, k)
			if b, err = e.appendValue(b, x[k], depth+1); err != nil {
				return b, err
			}
		}
		clear(e.keys[base:])
		e.keys = e.keys[:base]
		return b, nil
	default:
		return b, fmt.Errorf("%w: %T", ErrUnsupportedType, v)
	}
}

// appendUint always uses an unsigned marker (never a positive fixint), so the
// decoder can tell an unsigned integer from a signed one.
func appendUint(b []byte, u uint64) []byte {
	switch {
	case u <= math.MaxUint8:
		return append(b, 0xcc, byte(u))
	case u <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xcd), uint16(u))
	case u <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, 0xce), uint32(u))
	default:
		return binary.BigEndian.AppendUint64(append(b, 0xcf), u)
	}
}

func (e *bodyEncoder) appendTensor(b []byte, t Tensor) ([]byte, error) {
	if err := checkTensor(&t); err != nil {
		return b, err
	}
	if len(e.tensors) >= MaxTensors {
		return b, fmt.Errorf("%w: more than %d tensors in one object", ErrTooLarge, MaxTensors)
	}
	idx := uint32(len(e.tensors))
	e.tensors = append(e.tensors, t)
	return binary.BigEndian.AppendUint32(append(b, 0xd6, tensorExt), idx), nil
}

// bodyDecoder reads one value's body; tensors are already resolved.
type bodyDecoder struct {
	tensors []Tensor
	// next is the index the next tensor reference must carry: the body
	// references every tensor once, in header order.
	next int
	// budget is how many more list elements and map keys and values the
	// body may still hold. Each takes at least one byte of its own, so the
	// total is bounded by the body's length: a hostile count cannot make
	// nested lists allocate more than that many slots altogether.
	budget int
}

// maxMapHint is the most entries a decoded map is sized for up front.
const maxMapHint = 64

func (d *bodyDecoder) readValue(b []byte, depth int) (any, []byte, error) {
	if depth > MaxDepth {
		return nil, b, fmt.Errorf("%w: nested deeper than %d", ErrTooDeep, MaxDepth)
	}
	if len(b) == 0 {
		return nil, b, ErrTruncated
	}
	switch c := b[0]; {
	case c == 0xd6: // fixext4: only the tensor reference is defined
		if len(b) < 6 {
			return nil, b, ErrTruncated
		}
		if b[1] != tensorExt {
			return nil, b, fmt.Errorf("%w: extension type %d", ErrCorrupt, int8(b[1]))
		}
		idx := binary.BigEndian.Uint32(b[2:6])
		if uint64(idx) >= uint64(len(d.tensors)) {
			return nil, b, fmt.Errorf("%w: tensor reference %d of %d", ErrOutOfRange, idx, len(d.tensors))
		}
		if int(idx) != d.next {
			return nil, b, fmt.Errorf("%w: tensor reference %d where %d is next", ErrOutOfRange, idx, d.next)
		}
		d.next++
		return d.tensors[idx], b[6:], nil
	case c >= 0xcc && c <= 0xcf: // unsigned markers
		u, rest, err := msgp.ReadUint64Bytes(b)
		return u, rest, wrapMsgp(err)
	}
	switch msgp.NextType(b) {
	case msgp.NilType:
		return nil, b[1:], nil
	case msgp.BoolType:
		return b[0] == 0xc3, b[1:], nil
	case msgp.IntType, msgp.UintType: // UintType here is a positive fixint
		v, rest, err := msgp.ReadInt64Bytes(b)
		return v, rest, wrapMsgp(err)
	case msgp.Float32Type:
		v, rest, err := msgp.ReadFloat32Bytes(b)
		return v, rest, wrapMsgp(err)
	case msgp.Float64Type:
		v, rest, err := msgp.ReadFloat64Bytes(b)
		return v, rest, wrapMsgp(err)
	case msgp.StrType:
		v, rest, err := msgp.ReadStringZC(b)
		return string(v), rest, wrapMsgp(err)
	case msgp.BinType:
		v, rest, err := msgp.ReadBytesZC(b)
		if err != nil {
			return nil, b, wrapMsgp(err)
		}
		// Cap the view at its length: appending to a decoded []byte must
		// not overwrite the rest of the buffer.
		return v[:len(v):len(v)], rest, nil
	case msgp.ArrayType:
		n, rest, err := msgp.ReadArrayHeaderBytes(b)
		if err != nil {
			return nil, b, wrapMsgp(err)
		}
		if uint64(n) > uint64(len(rest)) || int(n) > d.budget { // every element takes a byte
			return nil, b, fmt.Errorf("%w: list of %d in %d bytes", ErrTruncated, n, len(rest))
		}
		d.budget -= int(n)
		out := make([]any, n)
		for i := range out {
			if out[i], rest, err = d.readValue(rest, depth+1); err != nil {
				return nil, b, err
			}
		}
		return out, rest, nil
	case msgp.MapType:
		n, rest, err := msgp.ReadMapHeaderBytes(b)
		if err != nil {
			return nil, b, wrapMsgp(err)
		}
		if uint64(n)*2 > uint64(len(rest)) || 2*int(n) > d.budget { // every entry takes two bytes
			return nil, b, fmt.Errorf("%w: map of %d in %d bytes", ErrTruncated, n, len(rest))
		}
		d.budget -= 2 * int(n)
		// A map's buckets cost ~40 bytes an entry, against the 2 an entry
		// takes at least in the buffer: the hint is capped so that a
		// count the buffer cannot back does not reserve 20x its size.
		out := make(map[string]any, min(n, maxMapHint))
		for range n {
			var k []byte
			if k, rest, err = msgp.ReadStringZC(rest); err != nil {
				return nil, b, wrapMsgp(err)
			}
			if out[string(k)], rest, err = d.readValue(rest, depth+1); err != nil {
				return nil, b, err
			}
		}
		return out, rest, nil
	default:
		return nil, b, fmt.Errorf("%w: unsupported MessagePack type byte 0x%02x", ErrCorrupt, b[0])
	}
}

func wrapMsgp(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, msgp.ErrShortBytes) {
		return ErrTruncated
	}
	return fmt.Errorf("%w: %v", ErrCorrupt, err)
}
