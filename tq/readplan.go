package tq

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/codec"
	"github.com/tqgo/tqgo/internal/uninit"
)

// A readPlan is one read of the cells of some rows: it chooses where each
// cell's value goes, and then checks and decodes what the engine read.
//
// A field stacks when the metadata says every row holds a tensor of one
// dtype and shape: its cells are read straight into their rows of the
// stacked tensor (backends.Store.Read fills a destination of the value's
// length), with no buffer per cell and no second copy to stack them (that
// copy into fresh memory was most of a large read's cost). The bytes
// before each cell's data are compared with what the codec writes for that
// dtype and shape, so a cell that is what the metadata says costs a
// comparison of those bytes and nothing more (a bool column's bytes are
// also checked to be 0 or 1, one pass over them); a cell whose bytes
// differ is decoded in full, and is corrupt (cellMismatchError) unless it
// decodes to a tensor of that dtype and shape. The cells of other fields
// are read whole (a tensor of known size into memory of its own, a value
// as the engine hands it) and decoded as decodeCells does.
type readPlan struct {
	partition string
	asked     []string // the fields asked for, sorted; nil: every field of the rows
	into      reuse    // memory the columns may take (BatchGetInto)

	rows    []*metadata.Row // what plan was last called with
	plans   []stackPlan
	others  []string            // fields read whole
	skeys   []string            // the plans' cells, then the whole ones
	tags    []string            // the engine's tag of each cell, by skeys
	whole   []int               // expected size of each cell read whole, after the plans'
	n       int                 // rows
	cells   []backends.ReadCell // per plan, per row, then the whole cells; nil until allocate
	scratch *splitScratch       // cells and their heads, back to the pool by release
}

// plan is the callback of the read (metadata.Colocated.ReadRows): it
// checks rows (an unknown key is ErrNotFound, a field some row lacks
// ErrNotReady, both as *KeyError) and returns the cells to read into.
// It may be called again with newer rows; each call starts afresh.
func (r *readPlan) plan(rows []*metadata.Row) ([]backends.ReadCell, error) {
	r.release()
	for _, row := range rows {
		if row == nil {
			return nil, nil // the caller reports the key (lookupFailed)
		}
	}
	fields := r.asked
	if len(fields) == 0 {
		fields = unionFields(rows)
	}
	r.rows, r.n = rows, len(rows)
	var plans []stackPlan
	r.others = nil
	for _, f := range fields {
		if p, ok := planStack(rows, f); ok {
			plans = append(plans, p)
		} else {
			r.others = append(r.others, f)
		}
	}
	r.plans = plans
	arena := newKeyArena(r.n*len(fields), maxLen(fields))
	r.tags = make([]string, 0, r.n*len(fields))
	for i := range plans {
		for _, row := range rows {
			fi := row.Fields[plans[i].field]
			arena.add(row.Index, plans[i].field, fi.Gen)
			r.tags = append(r.tags, fi.BackendTag)
		}
	}
	if err := addCellKeys(arena, &r.tags, r.partition, rows, r.others); err != nil {
		return nil, err
	}
	r.skeys = arena.keys()
	r.whole = wholeSizes(rows, r.others)
	return r.allocate(), nil
}

// lookupFailed names the first key of keys whose row is nil.
func lookupFailed(partition string, keys []string, rows []*metadata.Row) error {
	for i, row := range rows {
		if row == nil {
			return &KeyError{Partition: partition, Key: keys[i], Err: ErrNotFound}
		}
	}
	return nil
}

// splitScratch is what a read needs only while it runs: the destinations
// and the bytes before each stacked cell's data. Reused across reads
// (about 100 KiB for 1024 rows, which cost a large, zeroed allocation each).
type splitScratch struct {
	cells []backends.ReadCell
	heads []byte
}

var splitScratchPool sync.Pool

// Scratch larger than this is not pooled: one huge read would otherwise
// pin its scratch for as long as reads keep taking it from the pool.
const (
	maxPooledDst   = 1 << 15 // destinations (120 B each)
	maxPooledHeads = 2 << 20 // bytes
)

// release returns the read's scratch to the pool; the destinations must
// not be used after it.
func (s *readPlan) release() {
	sc := s.scratch
	s.scratch, s.cells = nil, nil
	if sc == nil || cap(sc.cells) > maxPooledDst || cap(sc.heads) > maxPooledHeads {
		return
	}
	clear(sc.cells[:cap(sc.cells)]) // no reference to the caller's columns stays behind
	splitScratchPool.Put(sc)
}

// wholeSizes is the expected length of each cell of fields of rows, as
// addCellKeys names them: a tensor's packed length when its
// metadata gives dtype and shape, else 0.
func wholeSizes(rows []*metadata.Row, fields []string) []int {
	out := make([]int, 0, len(rows)*len(fields))
	for _, f := range fields {
		var (
			prev map[string]metadata.FieldInfo
			size int
		)
		for i, r := range rows {
			if i == 0 || !metadata.SameMap(r.Fields, prev) {
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

// bytes is the size of the values read.
func (s *readPlan) bytes() int64 {
	var n int64
	for i := range s.cells {
		c := &s.cells[i]
		if c.Value != nil {
			n += int64(len(c.Value))
		} else if c.Found {
			n += int64(len(c.Head) + len(c.Body))
		}
	}
	return n
}

// wholeValues are the values of the cells read whole, as read: nil for a
// missing one. They stay valid after release.
func (s *readPlan) wholeValues() [][]byte {
	out := make([][]byte, len(s.whole))
	for i, d := range s.cells[len(s.cells)-len(s.whole):] {
		switch {
		case !d.Found:
		case d.Value != nil:
			out[i] = d.Value
		case d.Body != nil:
			out[i] = d.Body // of the expected length: read into it
		default:
			out[i] = []byte{} // a value of no bytes, which does not decode
		}
	}
	return out
}

// allocate makes the stacked columns and the destinations of the cells.
func (s *readPlan) allocate() []backends.ReadCell {
	n := s.n
	sc, _ := splitScratchPool.Get().(*splitScratch)
	if sc == nil {
		sc = &splitScratch{}
	}
	headBytes := 0
	for i := range s.plans {
		headBytes += n * len(s.plans[i].prefix)
	}
	if need := n*len(s.plans) + len(s.whole); cap(sc.cells) < need {
		sc.cells = make([]backends.ReadCell, 0, need)
	}
	if cap(sc.heads) < headBytes {
		sc.heads = make([]byte, headBytes)
	}
	dst, heads := sc.cells[:0], sc.heads[:headBytes] // heads: read into before check compares them
	for i := range s.plans {
		p := &s.plans[i]
		h := len(p.prefix)
		// Not zeroed: finish exposes a column only when every row's
		// bytes came from its cell (read into it, or copied by check).
		p.out = s.into.bytes(p.field, n*p.size, p.dtype.ItemSize())
		for j := range n {
			k := len(dst)
			dst = append(dst, backends.ReadCell{Key: s.skeys[k], Tag: s.tags[k], Head: heads[j*h : (j+1)*h : (j+1)*h], Body: p.out[j*p.size : (j+1)*p.size : (j+1)*p.size]})
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
		k := len(dst)
		d := backends.ReadCell{Key: s.skeys[k], Tag: s.tags[k]}
		if size > 0 {
			d.Body, slab = slab[:size:size], slab[(size+15)&^15:]
		}
		dst = append(dst, d)
	}
	sc.cells, s.scratch, s.cells = dst, sc, dst
	return dst
}

// finish checks and decodes what the engine read into the plan's cells,
// for rows (those plan was last called with), and returns the columns. A
// cell missing is errVanished, one that is not what the metadata names is
// corrupt; both name the cell.
func (s *readPlan) finish(rows []*metadata.Row) (Batch, error) {
	n := len(rows)
	out := make(Batch, len(s.plans)+len(s.others))
	for i := range s.plans {
		p := &s.plans[i]
		if err := p.check(s.partition, rows, s.cells[i*n:(i+1)*n]); err != nil {
			return nil, err
		}
		shape := append([]int64{int64(n)}, p.shape...)
		out[p.field] = Column{kind: KindStacked, stacked: codec.Tensor{DType: p.dtype, Shape: shape, Data: p.out}}
	}
	if len(s.others) > 0 {
		other, err := decodeCells(s.partition, rows, s.others, s.wholeValues(), s.into)
		if err != nil {
			return nil, err
		}
		maps.Copy(out, other)
	}
	return out, nil
}

// stackPlan is one stacked field of a readPlan.
type stackPlan struct {
	field  string
	dtype  codec.DType
	shape  []int64 // of one row
	prefix []byte  // what precedes each cell's data
	size   int     // data bytes per row
	out    []byte  // the stacked data
}

// planStack reports whether field f of rows is known to stack, and how.
func planStack(rows []*metadata.Row, f string) (stackPlan, bool) {
	if len(rows) == 0 {
		return stackPlan{}, false
	}
	first, found := rows[0].Fields[f]
	if !found || first.DType == "" {
		return stackPlan{}, false
	}
	prev := rows[0].Fields
	for _, r := range rows[1:] {
		if metadata.SameMap(r.Fields, prev) {
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

// check verifies what the engine read for the plan's cells, and copies into
// the column a cell that was not read into it.
func (p *stackPlan) check(partition string, rows []*metadata.Row, dst []backends.ReadCell) error {
	for i := range dst {
		d := &dst[i]
		if !d.Found {
			return &KeyError{Partition: partition, Key: rows[i].Key, Field: p.field, Err: errVanished}
		}
		// The column is not zeroed: its row is trusted only when the
		// engine read into it (Body still is the row), else the cell is
		// decoded and copied into the row itself.
		row := p.out[i*p.size : (i+1)*p.size]
		if d.Value == nil && bytes.Equal(d.Head, p.prefix) && sameStart(d.Body, row) {
			if p.dtype == codec.Bool {
				if err := (codec.Tensor{DType: p.dtype, Shape: p.shape, Data: row}).ValidateBools(); err != nil {
					return &KeyError{Partition: partition, Key: rows[i].Key, Field: p.field, Err: fmt.Errorf("%w: %w", codec.ErrCorrupt, err)}
				}
			}
			continue
		}
		// Another writer's encoding of the cell, or another value: decode
		// it whole.
		buf := d.Value
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
