package codec

import (
	"encoding/binary"
	"fmt"
)

// tensorAlign is the alignment of every tensor payload's offset, so that View
// is zero-copy for every element type when the buffer itself is aligned.
const tensorAlign = 16

// layout is where one object's pieces go in its packed buffer.
type layout struct {
	head       []byte // payload 0 (header + body), in the encoder's arena
	firstT     int    // index of its first tensor in the encoder's tensor list
	numT       int    // how many tensors it has
	headOffset int    // offset of payload 0
	size       int    // packed size in bytes
}

func align(n int) int { return (n + tensorAlign - 1) &^ (tensorAlign - 1) }

// encoder turns values into layouts. Not safe for concurrent use.
type encoder struct {
	arena   []byte   // payload 0 of every object, back to back
	body    []byte   // scratch for one body
	tensors []Tensor // every object's tensors, flattened
	metas   []tensorMeta
	hdr     header
	be      bodyEncoder
}

// add encodes v's header and records its layout.
func (e *encoder) add(v any) (layout, error) {
	e.be.tensors = e.be.tensors[:0]
	var err error
	if e.body, err = e.be.appendValue(e.body[:0], v, 0); err != nil {
		return layout{}, err
	}
	e.metas = e.metas[:0]
	for _, t := range e.be.tensors {
		e.metas = append(e.metas, tensorMeta{DType: t.DType.String(), Shape: t.Shape})
	}
	e.hdr = header{Version: formatVersion, Tensors: e.metas}
	start := len(e.arena)
	if e.arena, err = e.hdr.MarshalMsg(e.arena); err != nil {
		return layout{}, fmt.Errorf("%w: %v", ErrUnsupportedType, err)
	}
	e.arena = append(e.arena, e.body...)
	l := layout{firstT: len(e.tensors), numT: len(e.be.tensors)}
	e.tensors = append(e.tensors, e.be.tensors...)
	// Growing the arena moves it, but the bytes behind this slice are never
	// written again within the batch, so the slice stays valid.
	l.head = e.arena[start:len(e.arena):len(e.arena)]
	count := 1 + l.numT
	l.headOffset = 4 + 8*count
	end := uint64(l.headOffset + len(l.head))
	for _, t := range e.be.tensors {
		end = uint64(align(int(end))) + uint64(len(t.Data))
		if end > maxPayload {
			return layout{}, fmt.Errorf("%w: packed object of more than %d bytes", ErrTooLarge, end)
		}
	}
	l.size = int(end)
	return l, nil
}

// packTable writes the offset table, payload 0 and the padding of l into dst,
// leaving the tensor bytes to copyTensors (which the pool may run).
func packTable(dst []byte, l layout, tensors []Tensor) {
	count := 1 + l.numT
	binary.LittleEndian.PutUint32(dst, uint32(count))
	binary.LittleEndian.PutUint32(dst[4:], uint32(l.headOffset))
	binary.LittleEndian.PutUint32(dst[8:], uint32(len(l.head)))
	end := l.headOffset + copy(dst[l.headOffset:], l.head)
	for i, t := range tensors {
		off := align(end)
		clear(dst[end:off]) // padding is zero, so equal values pack to equal bytes
		binary.LittleEndian.PutUint32(dst[4+8*(i+1):], uint32(off))
		binary.LittleEndian.PutUint32(dst[8+8*(i+1):], uint32(len(t.Data)))
		end = off + len(t.Data)
	}
}

// tensorOffsets calls f with each tensor of l and its offset in the buffer.
func tensorOffsets(l layout, tensors []Tensor, f func(t Tensor, off int)) {
	end := l.headOffset + len(l.head)
	for _, t := range tensors {
		off := align(end)
		f(t, off)
		end = off + len(t.Data)
	}
}

// Encode packs one value into a new buffer. For many values use a Packer.
func Encode(v any) ([]byte, error) {
	var e encoder
	l, err := e.add(v)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, l.size)
	ts := e.tensors[l.firstT : l.firstT+l.numT]
	packTable(buf, l, ts)
	tensorOffsets(l, ts, func(t Tensor, off int) { copy(buf[off:], t.Data) })
	return buf, nil
}

// Decode unpacks one buffer. Tensor bytes and []byte values alias buf.
func Decode(buf []byte) (any, error) {
	var d decoder
	return d.decode(buf)
}

// decoder holds scratch reused across the objects of a batch.
type decoder struct {
	hdr  header
	body bodyDecoder
}

func (d *decoder) decode(buf []byte) (any, error) {
	if len(buf) < 4 {
		return nil, fmt.Errorf("%w: %d bytes, need at least 4", ErrTruncated, len(buf))
	}
	count := uint64(binary.LittleEndian.Uint32(buf))
	if count == 0 {
		return nil, fmt.Errorf("%w: no payloads", ErrCountTooLarge)
	}
	tableEnd := 4 + 8*count
	if tableEnd > uint64(len(buf)) {
		return nil, fmt.Errorf("%w: %d payloads need a %d-byte table, buffer has %d bytes", ErrCountTooLarge, count, tableEnd, len(buf))
	}
	payload := func(i uint64) ([]byte, error) {
		off := uint64(binary.LittleEndian.Uint32(buf[4+8*i:]))
		size := uint64(binary.LittleEndian.Uint32(buf[8+8*i:]))
		if off+size > uint64(len(buf)) {
			return nil, fmt.Errorf("%w: payload %d at %d+%d, buffer has %d bytes", ErrOutOfRange, i, off, size, len(buf))
		}
		if size > 0 && off < tableEnd {
			return nil, fmt.Errorf("%w: payload %d at %d overlaps the %d-byte table", ErrOutOfRange, i, off, tableEnd)
		}
		return buf[off : off+size : off+size], nil
	}
	head, err := payload(0)
	if err != nil {
		return nil, err
	}
	body, err := d.hdr.UnmarshalMsg(head)
	if err != nil {
		return nil, wrapMsgp(err)
	}
	if d.hdr.Version != formatVersion {
		return nil, fmt.Errorf("%w: format version %d, this decoder reads %d", ErrCorrupt, d.hdr.Version, formatVersion)
	}
	if uint64(len(d.hdr.Tensors)) != count-1 {
		return nil, fmt.Errorf("%w: header lists %d tensors, table has %d payloads", ErrCountTooLarge, len(d.hdr.Tensors), count)
	}
	d.body.tensors = d.body.tensors[:0]
	for i, m := range d.hdr.Tensors {
		data, err := payload(uint64(i) + 1)
		if err != nil {
			return nil, err
		}
		dt, ok := dtypeByName[m.DType]
		if !ok {
			return nil, corrupt(fmt.Errorf("%w: %q", ErrUnknownDType, m.DType))
		}
		// The header's shape slice is reused by the next decode: copy it.
		t := Tensor{DType: dt, Shape: append([]int64(nil), m.Shape...), Data: data}
		if err := t.Validate(); err != nil {
			return nil, corrupt(err)
		}
		if t.Shape == nil {
			t.Shape = []int64{}
		}
		d.body.tensors = append(d.body.tensors, t)
	}
	v, rest, err := d.body.readValue(body, 0)
	if err != nil {
		return nil, corrupt(err)
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the value", ErrCorrupt, len(rest))
	}
	return v, nil
}
