package codec

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"sync"

	"github.com/tinylib/msgp/msgp"

	"github.com/tqgo/tqgo/internal/uninit"
)

// tensorAlign is the alignment of every tensor payload's offset, so that View
// is zero-copy for every element type when the buffer itself is aligned.
const tensorAlign = 16

// maxDims is the most dimensions a tensor shape may have: the header's
// decoder limit (msgp:limit arrays in header.go).
const maxDims = 65536

// layout is where one object's pieces go in its packed buffer.
type layout struct {
	headStart int // payload 0 (header + body) is arena[headStart:headStart+headLen]
	headLen   int
	firstT    int // index of its first tensor in the encoder's data list
	numT      int // how many tensors it has
	size      int // packed size in bytes
}

func align(n int) int { return (n + tensorAlign - 1) &^ (tensorAlign - 1) }

// encoder turns values into layouts. Not safe for concurrent use; encoders
// are recycled through encoderPool, so a batch allocates nothing per object
// once its scratch has grown.
type encoder struct {
	arena   []byte   // payload 0 of every object, back to back
	data    [][]byte // every object's tensor bytes, flattened
	layouts []layout // one per object of the batch
	sizes   []int    // packed sizes, handed to the Allocator
	be      bodyEncoder
	// The pool path's scratch: the tensor copies, and the same cut into
	// chunks.
	jobs, pieces []copyJob
}

var encoderPool = sync.Pool{New: func() any { return new(encoder) }}

func getEncoder() *encoder { return encoderPool.Get().(*encoder) }

// putEncoder drops every reference to the caller's values and recycles e,
// unless one huge batch grew its scratch (do not pin that forever).
func putEncoder(e *encoder) {
	if cap(e.arena) > 4<<20 || cap(e.data) > 1<<16 || cap(e.layouts) > 1<<16 || cap(e.be.body) > 4<<20 || cap(e.pieces) > 1<<16 || cap(e.jobs) > 1<<16 {
		return
	}
	clear(e.data[:cap(e.data)])
	clear(e.jobs[:cap(e.jobs)])
	clear(e.pieces[:cap(e.pieces)])
	e.jobs, e.pieces = e.jobs[:0], e.pieces[:0]
	clear(e.be.tensors[:cap(e.be.tensors)])
	clear(e.be.keys[:cap(e.be.keys)])
	e.arena, e.data, e.layouts, e.sizes = e.arena[:0], e.data[:0], e.layouts[:0], e.sizes[:0]
	e.be.tensors, e.be.keys = e.be.tensors[:0], e.be.keys[:0]
	encoderPool.Put(e)
}

// add encodes v's payload 0 (header and body) into the arena and fills l
// with where each of v's pieces goes in its packed buffer.
func (e *encoder) add(v any, l *layout) error {
	start := len(e.arena)
	*l = layout{headStart: start, firstT: len(e.data)}
	// Fast path: a bare tensor, the common object. It writes exactly what the
	// general path writes (TestSingleTensorFastPath checks that).
	var t *Tensor
	switch x := v.(type) {
	case Tensor:
		t = &x
	case *Tensor:
		t = x
	}
	if t != nil {
		if err := checkTensor(t); err != nil {
			return err
		}
		e.arena = appendSingleHeader(e.arena, t)
		e.data = append(e.data, t.Data)
		l.numT = 1
	} else {
		be := &e.be
		be.tensors, be.keys = be.tensors[:0], be.keys[:0]
		var err error
		if be.body, err = be.appendValue(be.body[:0], v, 0); err != nil {
			return err
		}
		e.arena = appendHeader(e.arena, be.tensors)
		e.arena = append(e.arena, be.body...)
		for i := range be.tensors {
			e.data = append(e.data, be.tensors[i].Data)
		}
		l.numT = len(be.tensors)
	}
	l.headLen = len(e.arena) - start
	end := uint64(4 + 8*(1+l.numT) + l.headLen)
	for _, d := range e.data[l.firstT:] {
		end = (end+tensorAlign-1)&^(tensorAlign-1) + uint64(len(d))
		if end > maxPayload {
			break
		}
	}
	if end > maxPayload {
		e.arena, e.data = e.arena[:start], e.data[:l.firstT]
		return fmt.Errorf("%w: packed object of more than %d bytes", ErrTooLarge, uint64(maxPayload))
	}
	l.size = int(end)
	return nil
}

// checkTensor is Validate, ValidateBools and the encoder's own limit on
// dimensions.
func checkTensor(t *Tensor) error {
	if err := checkLayout(t); err != nil {
		return err
	}
	return t.ValidateBools()
}

// checkLayout is Validate plus the encoder's own limit on dimensions. Its
// fast path accepts only tensors Validate accepts; anything else (errors
// included) is left to Validate.
func checkLayout(t *Tensor) error {
	if t.DType.Valid() && len(t.Shape) <= maxDims {
		// Bytes, not elements: itemsize >= 1, so a byte count that stays
		// within MaxInt bounds the element count NumElements computes too.
		n := uint64(dtypeTable[t.DType].itemsize)
		ok := true
		for _, d := range t.Shape {
			hi, lo := bits.Mul64(n, uint64(d))
			if d < 0 || hi != 0 || lo > math.MaxInt {
				ok = false
				break
			}
			n = lo
		}
		if ok && n == uint64(len(t.Data)) && n <= maxPayload {
			return nil
		}
	}
	if err := t.Validate(); err != nil {
		return err
	}
	if len(t.Shape) > maxDims {
		return fmt.Errorf("%w: %d dimensions, at most %d", ErrTooLarge, len(t.Shape), maxDims)
	}
	return nil
}

// appendHeader appends the header of an object holding tensors. It writes
// exactly the bytes of the generated header.MarshalMsg (TestHeaderMatchesMsgp)
// without building a header value or calling Msgsize.
func appendHeader(b []byte, tensors []Tensor) []byte {
	b = append(b, 0x92) // tuple of 2
	b = msgp.AppendUint8(b, formatVersion)
	b = msgp.AppendArrayHeader(b, uint32(len(tensors)))
	for i := range tensors {
		b = appendMeta(b, &tensors[i])
	}
	return b
}

// dtypeWire is each dtype's name as a MessagePack str, ready to append.
var dtypeWire = func() (w [numDTypes]string) {
	for d := Bool; d < numDTypes; d++ {
		w[d] = string(msgp.AppendString(nil, dtypeTable[d].name))
	}
	return w
}()

// appendMeta appends one tensor's [dtype, shape] tuple. t.DType is valid.
func appendMeta(b []byte, t *Tensor) []byte {
	b = append(b, 0x92) // tuple of 2
	b = append(b, dtypeWire[t.DType]...)
	b = msgp.AppendArrayHeader(b, uint32(len(t.Shape)))
	for _, d := range t.Shape {
		if uint64(d) <= 0x7f {
			b = append(b, byte(d)) // positive fixint, as AppendInt64 writes it
		} else {
			b = msgp.AppendInt64(b, d)
		}
	}
	return b
}

// appendSingleHeader appends payload 0 of an object that is one tensor: the
// header listing it, then the body, a reference to tensor 0.
func appendSingleHeader(b []byte, t *Tensor) []byte {
	b = append(b, 0x92, formatVersion, 0x91) // formatVersion < 128: a fixint
	b = appendMeta(b, t)
	return append(b, 0xd6, tensorExt, 0, 0, 0, 0)
}

// copyJob is one memory copy of the parallel phase.
type copyJob struct{ dst, src []byte }

// pack writes object l into dst (len(dst) >= l.size): the offset table,
// payload 0, zeroed padding, and the tensor bytes, unless jobs is non-nil,
// in which case the tensor copies are appended to *jobs for the pool.
func (e *encoder) pack(dst []byte, l *layout, jobs *[]copyJob) {
	dst = dst[:l.size]
	count := 1 + l.numT
	headOff := 4 + 8*count
	binary.LittleEndian.PutUint32(dst, uint32(count))
	binary.LittleEndian.PutUint32(dst[4:], uint32(headOff))
	binary.LittleEndian.PutUint32(dst[8:], uint32(l.headLen))
	end := headOff + copy(dst[headOff:], e.arena[l.headStart:l.headStart+l.headLen])
	for i, d := range e.data[l.firstT : l.firstT+l.numT] {
		off := align(end)
		clear(dst[end:off]) // padding is zero, so equal values pack to equal bytes
		binary.LittleEndian.PutUint32(dst[12+8*i:], uint32(off))
		binary.LittleEndian.PutUint32(dst[16+8*i:], uint32(len(d)))
		end = off + len(d)
		if jobs != nil {
			if len(d) > 0 {
				*jobs = append(*jobs, copyJob{dst: dst[off:end], src: d})
			}
			continue
		}
		copy(dst[off:end], d)
	}
}

// Encode packs one value into a new buffer. For many values use a Packer.
func Encode(v any) ([]byte, error) {
	e := getEncoder()
	defer putEncoder(e)
	var l layout
	if err := e.add(v, &l); err != nil {
		return nil, err
	}
	buf := uninit.Bytes(l.size) // pack writes every byte
	e.pack(buf, &l, nil)
	return buf, nil
}

// Decode unpacks one buffer. Tensor bytes and []byte values alias buf.
func Decode(buf []byte) (any, error) {
	var d decoder
	return d.decode(buf)
}

// decoder holds scratch reused across the objects of a batch.
type decoder struct {
	dims    []int64 // every tensor's shape, back to back, before the copy out
	ndims   []int   // how many of dims each tensor has
	tensors []Tensor
	body    bodyDecoder
	// slab, when slabSize > 0, is carved into the decoded shapes of many
	// objects, so a batch does not allocate one shape per object.
	slab     []int64
	slabSize int
	// The last buffer readSingle read: the cells of a column mostly have
	// the same header, which need not be parsed again.
	lastHead  []byte
	lastDType DType
	lastLen   int
}

// shapes returns n int64s for the decoded shapes of one object.
func (d *decoder) shapes(n int) []int64 {
	if d.slabSize == 0 || n > d.slabSize/4 {
		return make([]int64, n)
	}
	if len(d.slab) < n {
		d.slab = make([]int64, d.slabSize)
	}
	s := d.slab[:n:n]
	d.slab = d.slab[n:]
	return s
}

// payload returns payload i of buf, whose table ends at tableEnd.
func payload(buf []byte, i int, tableEnd uint64) ([]byte, error) {
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
	if count-1 > MaxTensors {
		return nil, fmt.Errorf("%w: %d tensors, at most %d", ErrCountTooLarge, count-1, MaxTensors)
	}
	head, err := payload(buf, 0, tableEnd)
	if err != nil {
		return nil, err
	}
	body, err := d.readHeader(head, int(count-1))
	if err != nil {
		return nil, err
	}
	// One allocation holds every shape of the object; each tensor gets a
	// capacity-limited piece, so appending to one cannot reach the next.
	var shapes []int64
	if len(d.dims) > 0 {
		shapes = d.shapes(len(d.dims))
		copy(shapes, d.dims)
	}
	at := 0
	for i := range d.tensors {
		t := &d.tensors[i]
		n := d.ndims[i]
		if n == 0 {
			t.Shape = []int64{}
		} else {
			t.Shape = shapes[at : at+n : at+n]
		}
		at += n
		if t.Data, err = payload(buf, i+1, tableEnd); err != nil {
			return nil, err
		}
		if err := t.Validate(); err != nil {
			return nil, corrupt(err)
		}
		if err := t.ValidateBools(); err != nil {
			return nil, corrupt(err)
		}
	}
	d.body.tensors = d.tensors
	d.body.next = 0
	d.body.budget = len(body)
	v, rest, err := d.body.readValue(body, 0)
	if err != nil {
		return nil, corrupt(err)
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the value", ErrCorrupt, len(rest))
	}
	if d.body.next != len(d.tensors) {
		return nil, fmt.Errorf("%w: header lists %d tensors, body references %d", ErrCountTooLarge, len(d.tensors), d.body.next)
	}
	clear(d.tensors) // the value holds them now; the scratch must not pin buf
	d.body.tensors = nil
	return v, nil
}

// singleTensor decodes buf when it is exactly what packing one bare tensor
// writes, to the tensor decode would give; it reports false for anything
// else, which decode reads or rejects.
func (d *decoder) singleTensor(buf []byte) (Tensor, bool) {
	dt, data, ok := d.readSingle(buf)
	if !ok {
		return Tensor{}, false
	}
	shape := []int64{}
	if len(d.dims) > 0 {
		shape = d.shapes(len(d.dims))
		copy(shape, d.dims)
	}
	return Tensor{DType: dt, Shape: shape, Data: data}, true
}

// readSingle reads buf when it is exactly what packing one bare tensor
// writes (payload 0 as appendSingleHeader writes it, then the tensor's
// bytes) and the tensor is valid, a bool tensor's bytes included: it
// returns the dtype and the tensor's bytes (aliasing buf), and leaves the
// shape in d.dims. It reports false for anything else.
func (d *decoder) readSingle(buf []byte) (DType, []byte, bool) {
	if len(buf) < tensorTableEnd || binary.LittleEndian.Uint32(buf) != 2 {
		return 0, nil, false
	}
	head, err := payload(buf, 0, tensorTableEnd)
	if err != nil {
		return 0, nil, false
	}
	data, err := payload(buf, 1, tensorTableEnd)
	if err != nil {
		return 0, nil, false
	}
	if d.lastHead != nil && bytes.Equal(head, d.lastHead) && len(data) == d.lastLen {
		// As the last buffer read: valid, d.dims holds the shape.
		return d.lastDType, data, d.lastDType != Bool || validBools(data)
	}
	d.lastHead = nil // d.dims changes below
	// [version, [[dtype, shape]]], the shape a fixarray.
	if len(head) < 4 || head[0] != 0x92 || head[1] != formatVersion || head[2] != 0x91 || head[3] != 0x92 {
		return 0, nil, false
	}
	name, b, err := msgp.ReadStringZC(head[4:])
	if err != nil {
		return 0, nil, false
	}
	dt, ok := lookupDType(name)
	if !ok || len(b) == 0 || b[0]&0xf0 != 0x90 {
		return 0, nil, false
	}
	n := int(b[0] & 0x0f)
	b = b[1:]
	d.dims = d.dims[:0]
	for range n {
		if len(b) > 0 && b[0] <= 0x7f { // positive fixint
			d.dims, b = append(d.dims, int64(b[0])), b[1:]
			continue
		}
		var dim int64
		if dim, b, err = msgp.ReadInt64Bytes(b); err != nil {
			return 0, nil, false
		}
		d.dims = append(d.dims, dim)
	}
	// The body: a reference to tensor 0, and nothing after it.
	if len(b) != 6 || b[0] != 0xd6 || b[1] != tensorExt || b[2]|b[3]|b[4]|b[5] != 0 {
		return 0, nil, false
	}
	if (Tensor{DType: dt, Shape: d.dims, Data: data}).Validate() != nil {
		return 0, nil, false
	}
	d.lastHead, d.lastDType, d.lastLen = head, dt, len(data)
	return dt, data, dt != Bool || validBools(data)
}

// readHeader parses the header at the start of payload 0 into d.tensors
// (dtypes only), d.dims and d.ndims, and returns the body after it. It reads
// what the generated header.UnmarshalMsg reads, but checks every count
// against the bytes left before allocating, and the tensor count against the
// offset table.
func (d *decoder) readHeader(b []byte, numT int) ([]byte, error) {
	n, b, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil {
		return nil, wrapMsgp(err)
	}
	if n != 2 {
		return nil, fmt.Errorf("%w: header is a list of %d, want 2", ErrCorrupt, n)
	}
	version, b, err := msgp.ReadUint8Bytes(b)
	if err != nil {
		return nil, wrapMsgp(err)
	}
	if version != formatVersion {
		return nil, fmt.Errorf("%w: format version %d, this decoder reads %d", ErrCorrupt, version, formatVersion)
	}
	if n, b, err = msgp.ReadArrayHeaderBytes(b); err != nil {
		return nil, wrapMsgp(err)
	}
	if uint64(n) != uint64(numT) || n > MaxTensors {
		return nil, fmt.Errorf("%w: header lists %d tensors, table has %d payloads", ErrCountTooLarge, n, numT+1)
	}
	d.dims, d.ndims = d.dims[:0], d.ndims[:0]
	d.tensors = d.tensors[:0]
	for range numT {
		if n, b, err = msgp.ReadArrayHeaderBytes(b); err != nil {
			return nil, wrapMsgp(err)
		}
		if n != 2 {
			return nil, fmt.Errorf("%w: tensor description is a list of %d, want 2", ErrCorrupt, n)
		}
		var name []byte
		if name, b, err = msgp.ReadStringZC(b); err != nil {
			return nil, wrapMsgp(err)
		}
		dt, ok := lookupDType(name)
		if !ok {
			return nil, corrupt(fmt.Errorf("%w: %q", ErrUnknownDType, name))
		}
		if n, b, err = msgp.ReadArrayHeaderBytes(b); err != nil {
			return nil, wrapMsgp(err)
		}
		if n > maxDims {
			return nil, fmt.Errorf("%w: shape of %d dimensions", ErrCorrupt, n)
		}
		if uint64(n) > uint64(len(b)) { // every dimension takes a byte
			return nil, fmt.Errorf("%w: shape of %d dimensions in %d bytes", ErrTruncated, n, len(b))
		}
		for range n {
			var dim int64
			if dim, b, err = msgp.ReadInt64Bytes(b); err != nil {
				return nil, wrapMsgp(err)
			}
			d.dims = append(d.dims, dim)
		}
		d.ndims = append(d.ndims, int(n))
		d.tensors = append(d.tensors, Tensor{DType: dt})
	}
	return b, nil
}
