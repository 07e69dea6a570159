package file

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/bits"
	"unsafe"

	"github.com/tqgo/tqgo/backends"
)

// A frame is one record of the write-ahead log or of a checkpoint:
//
//	length  uint32 LE: the payload's length
//	crc     uint32 LE: CRC-32C of the length's four bytes and the payload,
//	        XOR the file's salt (a log segment's: see salt)
//	payload kind byte, body, stamp (int64 LE, the time of the append,
//	        microseconds since the Unix epoch; 0 where unused)
//
// The stamp comes last so that the writer can set it as it queues the
// frame, finishing a checksum its caller began (CRC-32C extends, it does
// not combine).
const (
	frameHeader = 8
	stampSize   = 8
	maxPayload  = math.MaxUint32
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Kinds of frame.
const (
	kindWrite   = 'w' // cells: n, then n × (key, value)
	kindDelete  = 'd' // keys: n, then n × key
	kindAppend  = 'a' // partition, n, then n × (id u64, indexes, data)
	kindCells   = 'c' // a kindWrite body, then a kindAppend body: one atomic record
	kindCompact = 'k' // partition, at.N u64, at.ID u64, has bool, snapshot
	kindSynced  = 's' // u64: the bytes of this segment known on the disk when it was written
	// Checkpoint frames.
	kindHead = 'H' // first segment to replay u64, next index u64, last stamp i64
	kindLog  = 'L' // one partition's log (see encodeLog)
	kindEnd  = 'E' // cells u64, logs u64: what the checkpoint held
)

// builder builds one frame in a buffer sized in advance: the cells of a
// write are kept in memory as slices of it. fb is the buffer's recycled
// allocation (nil for one of its own: see framePool).
//
// The checksum is computed as the frame is built, a few KiB at a time,
// over bytes just copied and still in the cache: crc is the checksum of
// the length the frame was sized for (want) and of the bytes before done.
type builder struct {
	b  []byte
	fb *frameBuf

	crc        uint32
	done, want int

	built    []cell // the cells as cells appended them, slices of b
	cellsEnd int    // where the cells' body ends in b
}

// newBuilder starts a frame of kind whose body is size bytes.
func newBuilder(kind byte, size int) builder {
	return startBuilder(make([]byte, frameHeader, frameHeader+1+size+stampSize), kind, size)
}

// startBuilder starts a frame of kind whose body is size bytes in b, of
// length frameHeader and capacity enough.
func startBuilder(b []byte, kind byte, size int) builder {
	f := builder{b: append(b, kind), done: frameHeader, want: 1 + size + stampSize}
	var n [4]byte
	binary.LittleEndian.PutUint32(n[:], uint32(f.want))
	f.crc = crc32.Update(0, castagnoli, n[:])
	return f
}

// crcChunk is the bytes the checksum catches up with at a time.
const crcChunk = 8 << 10

// sum extends the checksum over the bytes appended since the last.
func (f *builder) sum() {
	f.crc = crc32.Update(f.crc, castagnoli, f.b[f.done:])
	f.done = len(f.b)
}

func (f *builder) uvarint(v uint64) { f.b = binary.AppendUvarint(f.b, v) }
func (f *builder) u64(v uint64)     { f.b = binary.LittleEndian.AppendUint64(f.b, v) }
func (f *builder) bytes(p []byte)   { f.uvarint(uint64(len(p))); f.b = append(f.b, p...) }
func (f *builder) str(s string)     { f.uvarint(uint64(len(s))); f.b = append(f.b, s...) }
func (f *builder) bool(v bool) {
	if v {
		f.b = append(f.b, 1)
	} else {
		f.b = append(f.b, 0)
	}
}

// cells appends a kindWrite body: each cell's Head and Body as one value.
// It keeps the cells as they lie in the frame (built), for the op, as
// decoding the frame would find them: a decode reads each key once more,
// a cache miss per cell on a frame of megabytes (0.2 ms of a GRPO put's
// 3072 cells on the 2-core VM).
func (f *builder) cells(cells []backends.Cell) {
	f.uvarint(uint64(len(cells)))
	f.built = make([]cell, len(cells))
	for i := range cells {
		c := &cells[i]
		f.uvarint(uint64(len(c.Key)))
		k := len(f.b)
		f.b = append(f.b, c.Key...)
		f.uvarint(uint64(len(c.Head) + len(c.Body)))
		v := len(f.b)
		f.b = append(append(f.b, c.Head...), c.Body...)
		if len(c.Key) > 0 {
			f.built[i].key = unsafe.String(&f.b[k], len(c.Key))
		}
		f.built[i].val = f.b[v:len(f.b):len(f.b)]
		if len(f.b)-f.done >= crcChunk {
			f.sum()
		}
	}
	f.cellsEnd = len(f.b)
}

// decode decodes the frame's body into o: its cells as cells kept them,
// if the frame was sized right (so its buffer never grew: they lie in
// it), the rest decoded.
func (f *builder) decode(o *op) error {
	kind, body := f.b[frameHeader], f.b[frameHeader+1:]
	if f.built == nil || (kind != kindWrite && kind != kindCells) || len(f.b)-frameHeader+stampSize != f.want {
		return o.decodeBody(kind, body)
	}
	o.kind, o.cells = kind, f.built
	if kind == kindCells {
		r := reader{b: f.b[f.cellsEnd:]}
		o.part, o.recs = r.appendBody()
		return r.err
	}
	return nil
}

// appendBody appends a kindAppend body.
func (f *builder) appendBody(partition string, recs []backends.Record) {
	f.str(partition)
	f.uvarint(uint64(len(recs)))
	for _, r := range recs {
		f.u64(r.ID)
		f.uvarint(r.Indexes)
		f.bytes(r.Data)
	}
}

// seal sets the length and returns the checksum of all but the stamp,
// which stamp finishes. It fails on a payload too long for a frame.
func (f *builder) seal() (partial uint32, err error) {
	n := len(f.b) - frameHeader + stampSize
	if n > maxPayload {
		return 0, fmt.Errorf("%w: a record of %d bytes exceeds the log's 4 GiB record limit", backends.ErrInvalid, n)
	}
	binary.LittleEndian.PutUint32(f.b, uint32(n))
	if n != f.want {
		// Sized wrong (a bug, or a builder made otherwise): sum it all.
		f.crc = crc32.Update(0, castagnoli, f.b[:4])
		f.done = frameHeader
	}
	f.sum()
	return f.crc, nil
}

// stamp appends the stamp and the checksum: the frame is complete.
func (f *builder) stamp(partial uint32, stamp int64) []byte {
	f.b = binary.LittleEndian.AppendUint64(f.b, uint64(stamp))
	crc := crc32.Update(partial, castagnoli, f.b[len(f.b)-stampSize:])
	binary.LittleEndian.PutUint32(f.b[4:], crc)
	return f.b
}

// salt is what a log segment's frames' checksums are XORed with: a
// recycled segment's file still holds the frames of its former life past
// the end of its new ones, and they must not read as this segment's.
func salt(seq uint64) uint32 {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], seq)
	return crc32.Checksum(b[:], castagnoli)
}

// checksum is a frame's checksum as stored, salted.
func checksum(hdr, payload []byte, salt uint32) uint32 {
	return crc32.Update(crc32.Update(0, castagnoli, hdr[:4]), castagnoli, payload) ^ salt
}

// finish seals and stamps a frame at once (checkpoint frames).
func (f *builder) finish(stamp int64) ([]byte, error) {
	partial, err := f.seal()
	if err != nil {
		return nil, err
	}
	return f.stamp(partial, stamp), nil
}

// Sizes of encodings, for sizing frames.
func uvarintLen(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }
func strLen(n int) int        { return uvarintLen(uint64(n)) + n }

func cellsLen(cells []backends.Cell) int {
	n := uvarintLen(uint64(len(cells)))
	for i := range cells {
		n += strLen(len(cells[i].Key)) + strLen(len(cells[i].Head)+len(cells[i].Body))
	}
	return n
}

func appendLen(partition string, recs []backends.Record) int {
	n := strLen(len(partition)) + uvarintLen(uint64(len(recs)))
	for _, r := range recs {
		n += 8 + uvarintLen(r.Indexes) + strLen(len(r.Data))
	}
	return n
}

// errShort is a frame body that ends too soon: a bug or a foreign file,
// as the checksum passed.
var errShort = errors.New("record body ends too soon")

// reader decodes a frame's body. Strings and byte slices alias the
// frame, which is not written again while anything refers to it (see
// frameBuf): a stored key or value costs no copy.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail() {
	if r.err == nil {
		r.err = errShort
	}
	r.b = nil
}

func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) u64() uint64 {
	if len(r.b) < 8 {
		r.fail()
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

func (r *reader) byte() byte {
	if len(r.b) < 1 {
		r.fail()
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *reader) bytes() []byte {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.fail()
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) str() string {
	b := r.bytes()
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// count reads a count of items of at least min bytes each, refusing one
// the rest of the body cannot hold (so a bad count allocates nothing).
func (r *reader) count(min int) int {
	n := r.uvarint()
	if n > uint64(len(r.b)/min) {
		r.fail()
		return 0
	}
	return int(n)
}

// cell is a stored value by key.
type cell struct {
	key string
	val []byte
}

// rec is an appended record as the log frame holds it.
type rec struct {
	id, indexes uint64
	data        []byte
}

// op is one decoded frame of the log: what apply applies, and where its
// caller waits for the outcome.
type op struct {
	kind  byte
	frame []byte
	fb    *frameBuf // frame's recycled allocation, nil for one of its own
	stamp int64

	cells []cell   // kindWrite, kindCells
	keys  []string // kindDelete
	part  string   // kindAppend, kindCells, kindCompact
	recs  []rec    // kindAppend, kindCells
	at    backends.Pos
	snap  []byte // kindCompact; nil with !hasSnap

	synced int64 // kindSynced
	has    bool

	// The caller's side: from is where the caller read the log (an
	// append's reply is the log after it), done is closed when tail and
	// err are set. Nil done: a replayed frame.
	from backends.Pos
	tail backends.Tail
	err  error
	done chan struct{}
}

// decode decodes a frame's payload (after the header) into o.
func (o *op) decode(payload []byte) error {
	if len(payload) < 1+stampSize {
		return errShort
	}
	o.stamp = int64(binary.LittleEndian.Uint64(payload[len(payload)-stampSize:]))
	return o.decodeBody(payload[0], payload[1:len(payload)-stampSize])
}

// decodeBody decodes the body of a frame of kind: a live write decodes
// its own frame before queueing it (but for the cells, which the builder
// kept as it laid them, where this finds them: TestBuiltCells), so that
// what it applies is what a replay of the frame applies.
func (o *op) decodeBody(kind byte, body []byte) error {
	o.kind = kind
	r := reader{b: body}
	switch o.kind {
	case kindWrite:
		o.cells = r.cells()
	case kindDelete:
		n := r.count(1)
		o.keys = make([]string, n)
		for i := range o.keys {
			o.keys[i] = r.str()
		}
	case kindAppend:
		o.part, o.recs = r.appendBody()
	case kindCells:
		o.cells = r.cells()
		o.part, o.recs = r.appendBody()
	case kindCompact:
		o.part = r.str()
		o.at = backends.Pos{N: r.u64(), ID: r.u64()}
		o.has = r.byte() != 0
		o.snap = r.bytes()
		if !o.has {
			o.snap = nil
		} else if o.snap == nil {
			o.snap = []byte{}
		}
	case kindSynced:
		o.synced = int64(r.u64())
	default:
		return fmt.Errorf("unknown record kind %q", o.kind)
	}
	return r.err
}

func (r *reader) cells() []cell {
	n := r.count(2)
	cells := make([]cell, n)
	for i := range cells {
		cells[i].key = r.str()
		cells[i].val = r.bytes()
		if cells[i].val == nil {
			cells[i].val = []byte{}
		}
	}
	return cells
}

func (r *reader) appendBody() (string, []rec) {
	part := r.str()
	n := r.count(10)
	recs := make([]rec, n)
	for i := range recs {
		recs[i] = rec{id: r.u64(), indexes: r.uvarint(), data: r.bytes()}
	}
	return part, recs
}
