package tq

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/codec"
	"github.com/tqgo/tqgo/internal/uninit"
)

// A stackRead reads the fields of rows that are known to stack straight
// into their stacked tensors, when the engine reads into caller memory
// (backends.SplitReader): a field stacks when the metadata says every row
// holds a tensor of one dtype and shape. Each cell's bytes go from the
// engine into their row of the column, with no buffer per cell and no
// second copy to stack them (that copy into fresh memory was most of a
// large read's cost). The bytes before each cell's data are compared with
// what the codec writes for that dtype and shape, so a cell that is what
// the metadata says costs a comparison of those bytes and nothing more (a
// bool column's bytes are also checked to be 0 or 1, one pass over them);
// a cell whose bytes differ is decoded in full, and is corrupt
// (cellMismatchError) unless it decodes to a tensor of that dtype and
// shape.
type stackRead struct {
	plans   []stackPlan
	skeys   []string              // the plans' cells, then the whole ones
	whole   []int                 // expected size of each cell read whole (addWhole), after the plans'
	n       int                   // rows
	dst     []backends.SplitValue // per plan, per row; nil until allocate
	scratch *splitScratch         // dst and the cells' heads, back to the pool by release
	into    reuse                 // memory the columns may take (BatchGetInto)
}

// splitScratch is what a stacked read needs only while it runs: the
// destinations and the bytes before each cell's data. Reused across reads
// (about 100 KiB for 1024 rows, which cost a large, zeroed allocation each).
type splitScratch struct {
	dst   []backends.SplitValue
	heads []byte
}

var splitScratchPool sync.Pool

// Scratch larger than this is not pooled: one huge read would otherwise
// pin its scratch for as long as reads keep taking it from the pool.
const (
	maxPooledDst   = 1 << 15 // destinations (80 B each)
	maxPooledHeads = 2 << 20 // bytes
)

// release returns the read's scratch to the pool; s's destinations must
// not be used after it.
func (s *stackRead) release() {
	sc := s.scratch
	s.scratch, s.dst = nil, nil
	if sc == nil || cap(sc.dst) > maxPooledDst || cap(sc.heads) > maxPooledHeads {
		return
	}
	clear(sc.dst) // no reference to the caller's columns stays behind
	splitScratchPool.Put(sc)
}

// sizes is each cell's expected length (prefix and data), by skeys; for
// a cell read whole, the length its metadata makes likely (0: unknown).
func (s *stackRead) sizes() []int {
	out := make([]int, 0, len(s.skeys))
	for _, p := range s.plans {
		for range s.n {
			out = append(out, len(p.prefix)+p.size)
		}
	}
	return append(out, s.whole...)
}

// addWhole adds cells to read whole beside the plans', for a read of other
// fields in the same request: sizes[i] is what cell i's metadata says its
// length is (a tensor's; 0 for a value, whose length it does not know). A
// value of that length is read into memory of its own, one of any other
// length whole into Other (engines cut their requests by these sizes, so
// a large cell counts for what it is). Call it before allocate.
func (s *stackRead) addWhole(skeys []string, sizes []int) {
	if len(skeys) == 0 {
		return
	}
	s.skeys = append(slices.Clip(s.skeys), skeys...)
	s.whole = append(s.whole, sizes...)
}

// wholeSizes is the expected length of each cell of fields of rows, as
// cellKeys names them, for addWhole: a tensor's packed length when its
// metadata gives dtype and shape, else 0.
func wholeSizes(rows []*backends.Row, fields []string) []int {
	out := make([]int, 0, len(rows)*len(fields))
	for _, f := range fields {
		var (
			prev map[string]backends.FieldInfo
			size int
		)
		for i, r := range rows {
			if i == 0 || !backends.SameMap(r.Fields, prev) {
				prev = r.Fields
				size = 0
				if fi := prev[f]; fi.DType != "" {
					if dt, err := codec.ParseDType(fi.DType); err == nil {
						if prefix, n, err := codec.TensorPrefix(dt, fi.Shape); err == nil && n <= maxInt-len(prefix) {
							size = len(prefix) + n
						}
					}
				}
			}
			out = append(out, size)
		}
	}
	return out
}

// wholeValues are the values of the cells addWhole added, as read: nil
// for a missing one. They stay valid after release.
func (s *stackRead) wholeValues() [][]byte {
	out := make([][]byte, len(s.whole))
	for i, d := range s.dst[len(s.dst)-len(s.whole):] {
		switch {
		case !d.Found:
		case d.Other != nil:
			out[i] = d.Other
		case d.Body != nil:
			out[i] = d.Body // of the expected length: read into it
		default:
			out[i] = []byte{} // a value of no bytes, which does not decode
		}
	}
	return out
}

// allocate makes the stacked columns and the destinations of the cells.
// It is apart from planStacked so that a read can send its requests
// before it allocates.
func (s *stackRead) allocate() []backends.SplitValue {
	n := s.n
	sc, _ := splitScratchPool.Get().(*splitScratch)
	if sc == nil {
		sc = &splitScratch{}
	}
	headBytes := 0
	for i := range s.plans {
		headBytes += n * len(s.plans[i].prefix)
	}
	if need := n*len(s.plans) + len(s.whole); cap(sc.dst) < need {
		sc.dst = make([]backends.SplitValue, 0, need)
	}
	if cap(sc.heads) < headBytes {
		sc.heads = make([]byte, headBytes)
	}
	dst, heads := sc.dst[:0], sc.heads[:headBytes] // heads: read into before check compares them
	for i := range s.plans {
		p := &s.plans[i]
		h := len(p.prefix)
		// Not zeroed: finish exposes a column only when every row's
		// bytes came from its cell (read into it, or copied by check).
		p.out = s.into.bytes(p.field, n*p.size, p.dtype.ItemSize())
		for j := range n {
			dst = append(dst, backends.SplitValue{Head: heads[j*h : (j+1)*h : (j+1)*h], Body: p.out[j*p.size : (j+1)*p.size : (j+1)*p.size]})
		}
		heads = heads[n*h:]
	}
	// The cells read whole that have an expected length share one buffer,
	// each at a multiple of 16 bytes as the codec aligns a buffer's
	// tensors (so decoded tensors view in place). Not zeroed: a cell's
	// bytes are used only when a value of exactly that length filled them.
	wholeBytes := 0
	for _, size := range s.whole {
		wholeBytes += (size + 15) &^ 15
	}
	slab := uninit.Bytes(wholeBytes)
	for _, size := range s.whole {
		var d backends.SplitValue
		if size > 0 {
			d.Body, slab = slab[:size:size], slab[(size+15)&^15:]
		}
		dst = append(dst, d)
	}
	sc.dst, s.scratch, s.dst = dst, sc, dst
	return dst
}

// planStacked returns the read of the fields of rows known to stack (nil:
// none) and the other fields.
func planStacked(rows []*backends.Row, fields []string) (_ *stackRead, rest []string) {
	n := len(rows)
	var plans []stackPlan
	for _, f := range fields {
		p, ok := planStack(rows, f)
		if !ok {
			rest = append(rest, f)
			continue
		}
		plans = append(plans, p)
	}
	if len(plans) == 0 {
		return nil, rest
	}
	arena := newKeyArena(n*len(plans), maxLen(fields))
	for i := range plans {
		for _, r := range rows {
			arena.add(r.Index, plans[i].field, r.Fields[plans[i].field].Gen)
		}
	}
	return &stackRead{plans: plans, skeys: arena.keys(), n: n}, rest
}

// fetchStacked reads the cells of s from the engine.
func (c *Client) fetchStacked(ctx context.Context, s *stackRead) error {
	if s.dst == nil {
		s.allocate()
	}
	return forChunks(ctx, len(s.skeys), c.opts.keysLimit, c.opts.ioDepth, func(ctx context.Context, lo, hi int) error {
		return c.splitReader.GetSplit(ctx, s.skeys[lo:hi], s.dst[lo:hi])
	})
}

// finish checks what fetchStacked read and returns the stacked columns.
// A cell missing is errVanished, one that is not the tensor the metadata
// names is corrupt; both name the cell.
func (s *stackRead) finish(partition string, rows []*backends.Row) (Batch, error) {
	n := len(rows)
	out := make(Batch, len(s.plans))
	for i := range s.plans {
		p := &s.plans[i]
		if err := p.check(partition, rows, s.dst[i*n:(i+1)*n]); err != nil {
			return nil, err
		}
		shape := append([]int64{int64(n)}, p.shape...)
		out[p.field] = Column{kind: KindStacked, stacked: codec.Tensor{DType: p.dtype, Shape: shape, Data: p.out}}
	}
	return out, nil
}

// stackPlan is one field of a stackRead.
type stackPlan struct {
	field  string
	dtype  codec.DType
	shape  []int64 // of one row
	prefix []byte  // what precedes each cell's data
	size   int     // data bytes per row
	out    []byte  // the stacked data
}

// planStack reports whether field f of rows is known to stack, and how.
func planStack(rows []*backends.Row, f string) (stackPlan, bool) {
	if len(rows) == 0 {
		return stackPlan{}, false
	}
	first, found := rows[0].Fields[f]
	if !found || first.DType == "" {
		return stackPlan{}, false
	}
	prev := rows[0].Fields
	for _, r := range rows[1:] {
		if backends.SameMap(r.Fields, prev) {
			continue // rows of one put share their map
		}
		prev = r.Fields
		fi, found := prev[f]
		if !found || fi.DType != first.DType || !slices.Equal(fi.Shape, first.Shape) {
			return stackPlan{}, false
		}
	}
	dt, err := codec.ParseDType(first.DType)
	if err != nil {
		return stackPlan{}, false
	}
	prefix, size, err := codec.TensorPrefix(dt, first.Shape)
	if err != nil || size > maxInt/len(rows) {
		return stackPlan{}, false
	}
	return stackPlan{field: f, dtype: dt, shape: first.Shape, prefix: prefix, size: size}, true
}

// check verifies what GetSplit read for the plan's cells, and copies into
// the column a cell that was not read into it.
func (p *stackPlan) check(partition string, rows []*backends.Row, dst []backends.SplitValue) error {
	for i := range dst {
		d := &dst[i]
		if !d.Found {
			return &KeyError{Partition: partition, Key: rows[i].Key, Field: p.field, Err: errVanished}
		}
		// The column is not zeroed: its row is trusted only when the
		// engine read into it (Body still is the row), else the cell is
		// decoded and copied into the row itself.
		row := p.out[i*p.size : (i+1)*p.size]
		if d.Other == nil && bytes.Equal(d.Head, p.prefix) && sameStart(d.Body, row) {
			if p.dtype == codec.Bool {
				if err := (codec.Tensor{DType: p.dtype, Shape: p.shape, Data: row}).ValidateBools(); err != nil {
					return &KeyError{Partition: partition, Key: rows[i].Key, Field: p.field, Err: fmt.Errorf("%w: %w", codec.ErrCorrupt, err)}
				}
			}
			continue
		}
		// Another writer's encoding of the cell, or another value: decode
		// it whole.
		buf := d.Other
		if buf == nil {
			buf = append(slices.Clip(d.Head), d.Body...)
		}
		v, err := codec.Decode(buf)
		if err != nil {
			return &KeyError{Partition: partition, Key: rows[i].Key, Field: p.field, Err: err}
		}
		if t, isTensor := v.(codec.Tensor); !isTensor || t.DType != p.dtype || !slices.Equal(t.Shape, p.shape) {
			spec := specOf(rows[i].Fields[p.field])
			return spec.mismatch(partition, rows[i], p.field, describeValue(v))
		}
		copy(row, v.(codec.Tensor).Data)
	}
	return nil
}

// sameStart reports whether a and b are the same memory (an empty row has
// none to check).
func sameStart(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

const maxInt = int(^uint(0) >> 1)
