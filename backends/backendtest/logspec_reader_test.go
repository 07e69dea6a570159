package backendtest_test

// A decoder of a shared engine's records and snapshots written from
// backends/LOG.md alone: its own MessagePack reader (no msgp, none of
// internal/rules' decoders), reading each value in the form the document
// says a writer uses (unsigned numbers in their smallest unsigned form,
// signed ones in their smallest signed form, a tag's unsigned numbers
// never as a fixint, floats as 0xcb), so a test that runs it over a real
// engine's log checks the document's every statement of layout.
// logspec_test.go runs it.

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ---- MessagePack, as LOG.md's conventions say it is written ----

// specReader reads values in order; the first error sticks.
type specReader struct {
	b   []byte
	err error
}

func (r *specReader) failf(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf(format, args...)
	}
}

// take returns the next n bytes.
func (r *specReader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b) {
		r.failf("%d bytes wanted, %d left", n, len(r.b))
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *specReader) peek() byte {
	if r.err != nil || len(r.b) == 0 {
		r.failf("no byte left")
		return 0
	}
	return r.b[0]
}

func (r *specReader) be(n int) uint64 {
	var v uint64
	for _, c := range r.take(n) {
		v = v<<8 | uint64(c)
	}
	return v
}

// u reads an unsigned number, which a writer puts in its smallest
// unsigned form: a positive fixint, then 0xcc to 0xcf.
func (r *specReader) u() uint64 {
	c := r.peek()
	if r.err != nil {
		return 0
	}
	var v uint64
	switch {
	case c <= 0x7f:
		r.take(1)
		return uint64(c)
	case c == 0xcc:
		r.take(1)
		v = r.be(1)
		if v <= 0x7f {
			r.failf("unsigned %d not in its smallest form", v)
		}
	case c == 0xcd:
		r.take(1)
		v = r.be(2)
		if v <= 0xff {
			r.failf("unsigned %d not in its smallest form", v)
		}
	case c == 0xce:
		r.take(1)
		v = r.be(4)
		if v <= 0xffff {
			r.failf("unsigned %d not in its smallest form", v)
		}
	case c == 0xcf:
		r.take(1)
		v = r.be(8)
		if v <= 0xffffffff {
			r.failf("unsigned %d not in its smallest form", v)
		}
	default:
		r.failf("byte %#x is not an unsigned number", c)
	}
	return v
}

// smallestSigned is the length of the smallest signed form of v: 1 for a
// fixint, else 2, 3, 5 or 9.
func smallestSigned(v int64) int {
	switch {
	case v >= -32 && v <= 127:
		return 1
	case v >= math.MinInt8 && v <= math.MaxInt8:
		return 2
	case v >= math.MinInt16 && v <= math.MaxInt16:
		return 3
	case v >= math.MinInt32 && v <= math.MaxInt32:
		return 5
	}
	return 9
}

// i reads a signed number, which a writer puts in its smallest signed
// form: a fixint, then 0xd0 to 0xd3.
func (r *specReader) i() int64 {
	c := r.peek()
	if r.err != nil {
		return 0
	}
	n := map[bool]int{true: 1}[c <= 0x7f || c >= 0xe0]
	switch c {
	case 0xd0, 0xd1, 0xd2, 0xd3:
		n = 1 + 1<<(c-0xd0)
	}
	if n == 0 {
		r.failf("byte %#x is not a signed number", c)
		return 0
	}
	b := r.take(n)
	if r.err != nil {
		return 0
	}
	var v int64
	switch n {
	case 1:
		v = int64(int8(c))
		if c <= 0x7f {
			v = int64(c)
		}
	case 2:
		v = int64(int8(b[1]))
	case 3:
		v = int64(int16(binary.BigEndian.Uint16(b[1:])))
	case 5:
		v = int64(int32(binary.BigEndian.Uint32(b[1:])))
	case 9:
		v = int64(binary.BigEndian.Uint64(b[1:]))
	}
	if smallestSigned(v) != n {
		r.failf("signed %d not in its smallest form", v)
	}
	return v
}

func (r *specReader) bl() bool {
	switch c := r.peek(); c {
	case 0xc2, 0xc3:
		r.take(1)
		return c == 0xc3
	default:
		r.failf("byte %#x is not a bool", c)
	}
	return false
}

// f reads a float64, always 0xcb.
func (r *specReader) f() float64 {
	if c := r.peek(); c != 0xcb {
		r.failf("byte %#x is not a float64", c)
		return 0
	}
	r.take(1)
	return math.Float64frombits(r.be(8))
}

func (r *specReader) s() string {
	c := r.peek()
	var n uint64
	switch {
	case c >= 0xa0 && c <= 0xbf:
		r.take(1)
		n = uint64(c & 0x1f)
	case c == 0xd9:
		r.take(1)
		n = r.be(1)
	case c == 0xda:
		r.take(1)
		n = r.be(2)
	case c == 0xdb:
		r.take(1)
		n = r.be(4)
	default:
		r.failf("byte %#x is not a str", c)
		return ""
	}
	return string(r.take(int(n)))
}

func (r *specReader) bin() []byte {
	var n uint64
	switch c := r.peek(); c {
	case 0xc4:
		r.take(1)
		n = r.be(1)
	case 0xc5:
		r.take(1)
		n = r.be(2)
	case 0xc6:
		r.take(1)
		n = r.be(4)
	default:
		r.failf("byte %#x is not a bin", c)
		return nil
	}
	return append([]byte{}, r.take(int(n))...)
}

// null consumes a nil if one is next.
func (r *specReader) null() bool {
	if r.err == nil && len(r.b) > 0 && r.b[0] == 0xc0 {
		r.take(1)
		return true
	}
	return false
}

// arr reads an array header; n is bounded by the bytes left (each value
// takes one at least).
func (r *specReader) arr() int {
	c := r.peek()
	var n uint64
	switch {
	case c >= 0x90 && c <= 0x9f:
		r.take(1)
		n = uint64(c & 0x0f)
	case c == 0xdc:
		r.take(1)
		n = r.be(2)
	case c == 0xdd:
		r.take(1)
		n = r.be(4)
	default:
		r.failf("byte %#x is not an array", c)
		return 0
	}
	if n > uint64(len(r.b)) {
		r.failf("array of %d values in %d bytes", n, len(r.b))
		return 0
	}
	return int(n)
}

func (r *specReader) mapHeader() int {
	c := r.peek()
	var n uint64
	switch {
	case c >= 0x80 && c <= 0x8f:
		r.take(1)
		n = uint64(c & 0x0f)
	case c == 0xde:
		r.take(1)
		n = r.be(2)
	case c == 0xdf:
		r.take(1)
		n = r.be(4)
	default:
		r.failf("byte %#x is not a map", c)
		return 0
	}
	if 2*n > uint64(len(r.b)) {
		r.failf("map of %d entries in %d bytes", n, len(r.b))
		return 0
	}
	return int(n)
}

func (r *specReader) strs() []string {
	var out []string
	for range r.arr() {
		out = append(out, r.s())
	}
	return out
}

func (r *specReader) idx() []uint64 {
	var out []uint64
	for range r.arr() {
		out = append(out, r.u())
	}
	return out
}

// ---- tags (LOG.md section 4) ----

// specUint is a tag's unsigned number, told apart from a signed one.
type specUint uint64

// tag reads a row's tag: nil, or a map whose keys are in increasing byte
// order.
func (r *specReader) tag() map[string]any {
	if r.null() {
		return nil
	}
	n := r.mapHeader()
	m := make(map[string]any, n)
	prev := ""
	for k := range n {
		key := r.s()
		if k > 0 && key <= prev {
			r.failf("tag keys %q then %q: not in increasing order", prev, key)
		}
		prev = key
		m[key] = r.tagValue(1)
	}
	return m
}

// tagValue reads a tag value at level depth: signed numbers in signed
// forms, unsigned ones in 0xcc-0xcf only (never a fixint).
func (r *specReader) tagValue(depth int) any {
	c := r.peek()
	switch {
	case r.err != nil:
		return nil
	case c == 0xc0:
		r.take(1)
		return nil
	case c == 0xc2 || c == 0xc3:
		return r.bl()
	case c <= 0x7f || c >= 0xe0 || c >= 0xd0 && c <= 0xd3:
		return r.i()
	case c >= 0xcc && c <= 0xcf:
		r.take(1)
		n := 1 << (c - 0xcc)
		v := r.be(n)
		if n > 1 && v < 1<<(8*n/2) {
			r.failf("tag unsigned %d not in its smallest unsigned form", v)
		}
		return specUint(v)
	case c == 0xcb:
		return r.f()
	case c >= 0xa0 && c <= 0xbf || c >= 0xd9 && c <= 0xdb:
		return r.s()
	case c >= 0xc4 && c <= 0xc6:
		return r.bin()
	case c >= 0x90 && c <= 0x9f || c == 0xdc || c == 0xdd:
		if depth > 32 {
			r.failf("a list at level %d", depth)
		}
		out := []any{}
		for range r.arr() {
			out = append(out, r.tagValue(depth+1))
		}
		return out
	case c >= 0x80 && c <= 0x8f || c == 0xde || c == 0xdf:
		if depth > 32 {
			r.failf("a map at level %d", depth)
		}
		n := r.mapHeader()
		m := make(map[string]any, n)
		prev := ""
		for k := range n {
			key := r.s()
			if k > 0 && key <= prev {
				r.failf("map keys %q then %q: not in increasing order", prev, key)
			}
			prev = key
			m[key] = r.tagValue(depth + 1)
		}
		return m
	}
	r.failf("byte %#x is not a tag value", c)
	return nil
}

// ---- field tables (LOG.md section 3) ----

type specField struct {
	DType      string
	Shape      []int64 // nil: a general value
	Gen        uint64
	BackendTag string
}

func (r *specReader) table() map[string]specField {
	n := r.mapHeader()
	m := make(map[string]specField, n)
	prev := ""
	for k := range n {
		name := r.s()
		if k > 0 && name <= prev {
			r.failf("fields %q then %q: not in increasing order", prev, name)
		}
		prev = name
		if parts := r.arr(); parts != 4 {
			r.failf("field %q of %d parts", name, parts)
		}
		var f specField
		f.DType = r.s()
		if !r.null() {
			f.Shape = []int64{}
			for range r.arr() {
				f.Shape = append(f.Shape, r.i())
			}
		}
		f.Gen = r.u()
		f.BackendTag = r.s()
		m[name] = f
	}
	return m
}

func (r *specReader) tables() []map[string]specField {
	var out []map[string]specField
	for range r.arr() {
		out = append(out, r.table())
	}
	return out
}

// tableRef reads a 1-based table number (0: none).
func (r *specReader) tableRef(tables []map[string]specField) (map[string]specField, uint64) {
	t := r.u()
	if t > uint64(len(tables)) {
		r.failf("table %d of %d", t, len(tables))
		return nil, t
	}
	if t == 0 {
		return nil, 0
	}
	return tables[t-1], t
}

// ---- records (LOG.md section 2) ----

type specRef struct {
	Index uint64
	Field string
	Gen   uint64
	Tag   string // B: the backend tag
	Time  int64  // far, orphans: the reservation's time
}

type specUpdate struct {
	Key   string
	Index uint64
	Table map[string]specField // nil: none (t 0)
	Tag   map[string]any
}

type specClaim struct {
	Task, Token                string
	Lease, Rows, Min, MaxDeliv int64
	Batch                      []int64 // nil, or [ranks, rank]
	Fields                     []string
	GroupTag, GroupSep         string
	GroupSize                  int64
	StaleTag                   string
	StaleDrop                  bool
	Floor                      float64
	Custom                     bool
	Units                      [][]uint64
	Drop                       []uint64
	Hold                       int64
	Replaces                   string
	HasDeadline                bool
	Deadline                   int64
	Partial                    bool
}

type specRecord struct {
	Kind byte
	// P, N
	N      uint64
	Fields []string  // P, E, N, U
	Keys   []string  // P, D, E; U: its updates' keys
	Sizes  [][]int64 // P, U: per field, per key; nil: none
	// U, Y: the put's first index (Y: the block's), and the block's token
	Base, BlockToken uint64
	// C, U
	Tables  int
	Updates []specUpdate
	// A
	Age int64
	// W, B
	Refs []specRef
	// F
	IDs []uint64
	// Q
	Claim *specClaim
	// K, R, Y
	Task    string
	Op      uint64
	Token   string
	Indexes []uint64
	Delay   int64
	Reason  string // a nack's, when its record gives one
	All     bool   // R: nil (every row)
	// L
	CapRows, CapBytes int64
	CapTasks          []string
}

func (r *specReader) refs(tagged bool) []specRef {
	var out []specRef
	want := 3
	if tagged {
		want = 4
	}
	for range r.arr() {
		if n := r.arr(); n != want {
			r.failf("cell of %d parts, want %d", n, want)
		}
		ref := specRef{Index: r.u(), Field: r.s(), Gen: r.u()}
		if tagged {
			ref.Tag = r.s()
		}
		out = append(out, ref)
	}
	return out
}

// pending reads `[[index, field, gen, time], ...]` (snapshots' far and
// orphans).
func (r *specReader) pending() []specRef {
	var out []specRef
	for range r.arr() {
		if n := r.arr(); n != 4 {
			r.failf("reservation of %d parts", n)
		}
		out = append(out, specRef{Index: r.u(), Field: r.s(), Gen: r.u(), Time: r.i()})
	}
	return out
}

func (r *specReader) claim() *specClaim {
	a := &specClaim{Task: r.s(), Token: r.s(), Lease: r.i(), Rows: r.i(), Min: r.i(), MaxDeliv: r.i()}
	if !r.null() {
		if n := r.arr(); n != 2 {
			r.failf("batch of %d values", n)
		}
		a.Batch = []int64{r.i(), r.i()}
	}
	a.Fields = r.strs()
	a.GroupTag, a.GroupSep, a.GroupSize = r.s(), r.s(), r.i()
	a.StaleTag, a.StaleDrop = r.s(), r.bl()
	a.Floor = r.f()
	a.Custom = r.bl()
	for range r.arr() {
		a.Units = append(a.Units, r.idx())
	}
	a.Drop = r.idx()
	a.Hold = r.i()
	a.Replaces = r.s()
	if r.err == nil && len(r.b) > 0 {
		a.HasDeadline = true
		a.Deadline = r.i()
		a.Partial = r.bl()
	}
	return a
}

// specSizes is one field's sizes as written: one for every key (All), or
// one per key (Each).
type specSizes struct {
	All  int64
	Each []int64 // nil: All
}

// sizes reads a P's or U's sizes: an array of one value per field, each
// one signed size or an array of them.
func (r *specReader) sizes() []specSizes {
	var out []specSizes
	for range r.arr() {
		var s specSizes
		if c := r.peek(); c >= 0x90 && c <= 0x9f || c == 0xdc || c == 0xdd {
			s.Each = []int64{}
			for range r.arr() {
				s.Each = append(s.Each, r.i())
			}
		} else {
			s.All = r.i()
		}
		out = append(out, s)
	}
	return out
}

// fitSizes checks sizes against nf fields and nk keys, and returns them
// per field, per key.
func (r *specReader) fitSizes(sizes []specSizes, nf, nk int) [][]int64 {
	if len(sizes) != nf {
		r.failf("sizes of %d fields, want %d", len(sizes), nf)
		return nil
	}
	out := make([][]int64, 0, nf)
	for _, s := range sizes {
		col := s.Each
		if col == nil {
			col = make([]int64, nk)
			for k := range col {
				col[k] = s.All
			}
		} else if len(col) != nk {
			r.failf("sizes of %d keys, want %d", len(col), nk)
		}
		if slices.ContainsFunc(col, func(v int64) bool { return v < 0 }) {
			r.failf("negative sizes %v", col)
		}
		out = append(out, col)
	}
	return out
}

// commit reads a C's body: the tables, then the updates, flat.
func (r *specReader) commit() (int, []specUpdate) {
	tables := r.tables()
	var ups []specUpdate
	for range r.arr() { // flat: 4 values per update
		u := specUpdate{Key: r.s(), Index: r.u()}
		u.Table, _ = r.tableRef(tables)
		u.Tag = r.tag()
		ups = append(ups, u)
	}
	return len(tables), ups
}

// increasing reports whether s is in increasing byte order, each once.
func increasing(s []string) bool {
	for i := 1; i < len(s); i++ {
		if s[i-1] >= s[i] {
			return false
		}
	}
	return true
}

// decodeSpecRecord decodes a record by LOG.md section 2. A writer puts
// nothing after the last value, so bytes left over are an error here.
func decodeSpecRecord(data []byte) (*specRecord, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("empty record")
	}
	rec := &specRecord{Kind: data[0]}
	r := &specReader{b: data[1:]}
	switch rec.Kind {
	case 'P':
		rec.N, rec.Fields, rec.Keys = r.u(), r.strs(), r.strs()
		if r.err == nil && len(r.b) > 0 {
			rec.Sizes = r.fitSizes(r.sizes(), len(rec.Fields), len(rec.Keys))
		}
	case 'C':
		rec.Tables, rec.Updates = r.commit()
	case 'N':
		rec.N, rec.Fields = r.u(), r.strs()
		if rec.N < 1 || rec.N > 4096 {
			r.failf("a block of %d indexes", rec.N)
		}
		if len(rec.Fields) == 0 || !increasing(rec.Fields) {
			r.failf("a block's fields %q: none, or not in increasing order", rec.Fields)
		}
	case 'U':
		rec.Base, rec.BlockToken, rec.Fields = r.u(), r.u(), r.strs()
		// The sizes come first, but their count of keys is the updates'.
		var sizes []specSizes
		sized := !r.null()
		if sized {
			sizes = r.sizes()
		}
		rec.Tables, rec.Updates = r.commit()
		for i, u := range rec.Updates {
			rec.Keys = append(rec.Keys, u.Key)
			if u.Index != rec.Base+uint64(i) {
				r.failf("update %d of key %q at index %d, want base %d + %d", i, u.Key, u.Index, rec.Base, i)
			}
			for f, fi := range u.Table {
				if fi.Gen != 0 || !slices.Contains(rec.Fields, f) {
					r.failf("update %d: field %q generation %d, want one of %q at 0", i, f, fi.Gen, rec.Fields)
				}
			}
		}
		if sized {
			rec.Sizes = r.fitSizes(sizes, len(rec.Fields), len(rec.Keys))
		}
	case 'Y':
		rec.Base, rec.BlockToken, rec.Indexes = r.u(), r.u(), r.idx()
	case 'D':
		rec.Keys = r.strs()
	case 'X':
	case 'A':
		rec.Age = r.i()
	case 'W':
		rec.Refs = r.refs(false)
	case 'B':
		rec.Refs = r.refs(true)
	case 'F':
		rec.IDs = r.idx()
	case 'Q':
		rec.Claim = r.claim()
	case 'K':
		rec.Task, rec.Op, rec.Token, rec.Indexes, rec.Delay = r.s(), r.u(), r.s(), r.idx(), r.i()
		if r.err == nil && len(r.b) > 0 { // a nack's reason
			if rec.Reason = r.s(); r.err == nil && (rec.Op != 2 || len(rec.Reason) > 512 || !utf8.ValidString(rec.Reason)) {
				r.failf("reason %q of op %d", rec.Reason, rec.Op)
			}
		}
	case 'R':
		rec.Task = r.s()
		if r.null() {
			rec.All = true
		} else {
			rec.Indexes = r.idx()
		}
	case 'L':
		rec.CapRows, rec.CapBytes, rec.CapTasks = r.i(), r.i(), r.strs()
	case 'E':
		rec.Fields, rec.Keys = r.strs(), r.strs()
	default:
		return nil, fmt.Errorf("kind %q", rec.Kind)
	}
	if r.err == nil && len(r.b) > 0 {
		r.failf("%d bytes after the last value", len(r.b))
	}
	if r.err != nil {
		return nil, fmt.Errorf("record %q: %w", rec.Kind, r.err)
	}
	return rec, nil
}

// ---- snapshots (LOG.md section 6) ----

type specGen struct {
	Field                string
	Next, Pend           uint64
	At, Old, Size, NSize int64
}

type specView struct {
	Table    map[string]specField
	T        uint64
	Tag      map[string]any
	Since    int64
	HasSince bool
}

type specSnapRow struct {
	Key   string
	Index uint64
	View  *specView // nil: not committed
	Gens  []specGen
}

type specEntry struct {
	Index      uint64
	State      uint64
	Deliveries int64
	Token      string
	Until, Max int64
	Reason     string // its last error ("" none), At when
	At         int64
	Granted    int64 // a leased row's claim time (0 none)
}

type specBatchRow struct {
	Key   string
	Index uint64
	View  *specView
}

type specBatch struct {
	Token string
	Rows  []specBatchRow
	Units [][]int64
	Taken []bool
}

type specStanding struct {
	Claim *specClaim
	Until int64
}

type specServed struct {
	Token string
	Until int64
	Rows  []uint64
}

type specTask struct {
	Name               string
	Indexed            bool
	Fields             []string
	GroupTag, GroupSep string
	GroupSize          int64
	StaleTag           string
	StaleDrop          bool
	Entries            []specEntry
	Parked             map[uint64]float64
	Batches            []specBatch
	Standing           []specStanding
	Served             []specServed
}

type specDeadline struct {
	Name     string
	Deadline int64
	Partial  bool
}

type specSnapshot struct {
	Tables  int
	Now     int64
	Seq     uint64
	Rows    []specSnapRow
	Far     []specRef
	Garbage []specRef
	Orphans []specRef
	Tasks   []specTask
	Voids   map[uint64]int64
	// The last section, when written.
	HasCapacity       bool
	CapRows, CapBytes int64
	CapTasks          []string
	Held              []specHeld
	Deadlines         []specDeadline
	Inserted          uint64
	Consumed          uint64
	Counts            map[string]uint64
	Partials          map[string][][]bool   // per task, per open batch, per unit
	Ends              map[string][]int64    // per task, per open batch: its end
	Takers            map[string][][]string // per task, per open batch: per rank, the token that took its share
	Undone            map[string]int64      // undone claim tokens, with their undo's time
	Blocks            []specBlock           // live blocks, by base
}

// specBlock is a live block of a snapshot.
type specBlock struct {
	Base, Token, N uint64
	At             int64
	Fields         []string
	Words          []uint64 // index Base+i is taken when bit i%64 of word i/64 is set
}

func (b *specBlock) taken(i uint64) bool { return b.Words[i/64]&(1<<(i%64)) != 0 }

type specHeld struct {
	Key   string
	Since int64
}

func (r *specReader) view(tables []map[string]specField, withSince bool) *specView {
	if r.null() {
		return nil
	}
	n := r.arr()
	if withSince && n != 3 || !withSince && n != 2 {
		r.failf("a row's view of %d values", n)
	}
	v := &specView{}
	v.Table, v.T = r.tableRef(tables)
	if v.T == 0 {
		r.failf("a committed row with table 0")
	}
	v.Tag = r.tag()
	if n == 3 {
		v.Since, v.HasSince = r.i(), true
	}
	return v
}

func decodeSpecSnapshot(data []byte) (*specSnapshot, error) {
	if len(data) == 0 || data[0] != 'S' {
		return nil, fmt.Errorf("not a snapshot")
	}
	r := &specReader{b: data[1:]}
	s := &specSnapshot{Voids: map[uint64]int64{}, Counts: map[string]uint64{}, Partials: map[string][][]bool{}, Ends: map[string][]int64{}, Takers: map[string][][]string{}, Undone: map[string]int64{}}
	tables := r.tables()
	s.Tables = len(tables)
	s.Now, s.Seq = r.i(), r.u()
	prevKey := ""
	for k := range r.arr() { // flat: key, index, view, gens
		row := specSnapRow{Key: r.s(), Index: r.u()}
		if k > 0 && row.Key <= prevKey {
			r.failf("rows %q then %q: not in key order", prevKey, row.Key)
		}
		prevKey = row.Key
		row.View = r.view(tables, true)
		for range r.arr() {
			if n := r.arr(); n != 7 {
				r.failf("gens of %d parts", n)
			}
			row.Gens = append(row.Gens, specGen{Field: r.s(), Next: r.u(), Pend: r.u(), At: r.i(), Old: r.i(), Size: r.i(), NSize: r.i()})
		}
		s.Rows = append(s.Rows, row)
	}
	s.Far = r.pending()
	s.Garbage = r.refs(true)
	s.Orphans = r.pending()
	prevTask := ""
	for k := range r.arr() { // flat: the tasks
		t := specTask{Name: r.s(), Parked: map[uint64]float64{}}
		if k > 0 && t.Name <= prevTask {
			r.failf("tasks %q then %q: not in name order", prevTask, t.Name)
		}
		prevTask = t.Name
		t.Indexed = r.bl()
		t.Fields = r.strs()
		t.GroupTag, t.GroupSep, t.GroupSize, t.StaleTag, t.StaleDrop = r.s(), r.s(), r.i(), r.s(), r.bl()
		for range r.arr() {
			n := r.arr()
			if n < 6 || n > 9 {
				r.failf("entry of %d parts", n)
			}
			e := specEntry{Index: r.u(), State: r.u(), Deliveries: r.i(), Token: r.s(), Until: r.i(), Max: r.i()}
			if n >= 8 {
				if e.Reason, e.At = r.s(), r.i(); e.Reason == "" || len(e.Reason) > 512 {
					r.failf("entry reason of %d bytes", len(e.Reason))
				}
			}
			if n == 7 || n == 9 {
				if e.Granted = r.i(); e.Granted <= 0 || e.State != 1 {
					r.failf("entry grant time %d on state %d", e.Granted, e.State)
				}
			}
			t.Entries = append(t.Entries, e)
		}
		for range r.arr() { // flat: index, version
			i := r.u()
			t.Parked[i] = r.f()
		}
		for range r.arr() { // flat: token, rows, units, taken
			b := specBatch{Token: r.s()}
			for range r.arr() { // flat: key, index, view
				br := specBatchRow{Key: r.s(), Index: r.u()}
				br.View = r.view(tables, false)
				b.Rows = append(b.Rows, br)
			}
			for range r.arr() {
				var u []int64
				for range r.arr() {
					u = append(u, r.i())
				}
				b.Units = append(b.Units, u)
			}
			for range r.arr() {
				b.Taken = append(b.Taken, r.bl())
			}
			t.Batches = append(t.Batches, b)
		}
		for range r.arr() { // flat: the claim as a Q record (bin), until
			rec := r.bin()
			st := specStanding{Until: 0}
			if r.err == nil {
				q, err := decodeSpecRecord(rec)
				if err != nil || q.Kind != 'Q' {
					r.failf("standing claim %x: %v", rec, err)
				} else {
					st.Claim = q.Claim
				}
			}
			st.Until = r.i()
			t.Standing = append(t.Standing, st)
		}
		for range r.arr() { // flat: token, until, [index, ...]
			t.Served = append(t.Served, specServed{Token: r.s(), Until: r.i(), Rows: r.idx()})
		}
		s.Tasks = append(s.Tasks, t)
	}
	for range r.arr() { // flat: id, time
		id := r.u()
		s.Voids[id] = r.i()
	}
	if r.err == nil && len(r.b) > 0 {
		s.HasCapacity = true
		s.CapRows, s.CapBytes, s.CapTasks = r.i(), r.i(), r.strs()
		n := r.arr() // two values per held row
		if n%2 != 0 {
			r.failf("held rows: %d values", n)
		}
		for range n / 2 {
			s.Held = append(s.Held, specHeld{Key: r.s(), Since: r.i()})
		}
		for range r.arr() { // flat: name, deadline, partial
			s.Deadlines = append(s.Deadlines, specDeadline{Name: r.s(), Deadline: r.i(), Partial: r.bl()})
		}
		s.Inserted, s.Consumed = r.u(), r.u()
		for range r.arr() { // flat: name, count
			name := r.s()
			s.Counts[name] = r.u()
		}
		for range r.arr() { // flat: name, [[bool, ...], ...]
			name := r.s()
			var per [][]bool
			for range r.arr() {
				flags := []bool{}
				for range r.arr() {
					flags = append(flags, r.bl())
				}
				per = append(per, flags)
			}
			s.Partials[name] = per
		}
		if r.err == nil && len(r.b) > 0 { // only when a task has an open batch, a token is undone or a block is live
			for range r.arr() { // flat: name, [end, ...]
				name := r.s()
				ends := []int64{}
				for range r.arr() {
					ends = append(ends, r.i())
				}
				s.Ends[name] = ends
			}
		}
		if r.err == nil && len(r.b) > 0 { // present as the ends are
			for range r.arr() { // flat: name, [[token, ...], ...]
				name := r.s()
				per := [][]string{}
				for range r.arr() {
					toks := []string{}
					for range r.arr() {
						toks = append(toks, r.s())
					}
					per = append(per, toks)
				}
				s.Takers[name] = per
			}
		}
		if r.err == nil && len(r.b) > 0 { // only when a token is undone or a block is live
			n := r.arr()
			if n%2 != 0 {
				r.failf("undone tokens of %d values", n)
			}
			for range n / 2 {
				tok := r.s()
				s.Undone[tok] = r.i()
			}
		}
		if r.err == nil && len(r.b) > 0 { // only when a block is live
			s.Blocks = r.blocks()
		}
	}
	if r.err == nil && len(r.b) > 0 {
		r.failf("%d bytes after the snapshot", len(r.b))
	}
	if r.err != nil {
		return nil, fmt.Errorf("snapshot: %w", r.err)
	}
	return s, nil
}

// blocks reads a snapshot's live blocks: by base, not overlapping, each
// [base, token, n, at, [field, ...], [word, ...]] with (n+63)/64 words, no bit
// set past n, and an index not taken.
func (r *specReader) blocks() []specBlock {
	var out []specBlock
	for range r.arr() {
		if n := r.arr(); n != 6 {
			r.failf("a block of %d parts", n)
			return out
		}
		b := specBlock{Base: r.u(), Token: r.u(), N: r.u(), At: r.i(), Fields: r.strs(), Words: r.idx()}
		if r.err != nil {
			return out
		}
		switch {
		case b.N < 1 || b.N > 4096:
			r.failf("a block of %d indexes", b.N)
		case len(b.Fields) == 0 || !increasing(b.Fields):
			r.failf("a block's fields %q", b.Fields)
		case uint64(len(b.Words)) != (b.N+63)/64:
			r.failf("a block of %d indexes in %d words", b.N, len(b.Words))
		case b.N%64 != 0 && b.Words[len(b.Words)-1]>>(b.N%64) != 0:
			r.failf("block at %d: bits set past its %d indexes", b.Base, b.N)
		case len(out) > 0 && out[len(out)-1].Base+out[len(out)-1].N > b.Base:
			r.failf("block at %d: overlapping or out of order", b.Base)
		}
		taken := 0
		for _, w := range b.Words {
			taken += bits.OnesCount64(w)
		}
		if uint64(taken) >= b.N {
			r.failf("block at %d: every index taken", b.Base)
		}
		out = append(out, b)
	}
	return out
}

// ---- group ids and lease tokens (LOG.md section 5) ----

// specGroupID is a row's group id as LOG.md spells it: a letter naming
// the kind of the value, then the value.
func specGroupID(tagName, sep, key string, tag map[string]any) (string, bool) {
	if tagName == "" {
		i := strings.LastIndex(key, sep)
		if i < 0 {
			return "", false
		}
		return "k" + key[:i], true
	}
	v, ok := tag[tagName]
	if !ok || v == nil {
		return "", false
	}
	switch x := v.(type) {
	case string:
		return "s" + x, true
	case int64:
		return "i" + strconv.FormatInt(x, 10), true
	case specUint:
		return "u" + strconv.FormatUint(uint64(x), 10), true
	case uint64:
		return "u" + strconv.FormatUint(x, 10), true
	case float64:
		return "f" + specFloat(x), true
	case bool:
		return "b" + strconv.FormatBool(x), true
	}
	return "t" + string(specTagBytes(nil, v)), true // lists, maps, bytes: their encoding
}

// specFloat spells a float as the shortest decimal that reads back as
// it, with an exponent (e+dd, e-dd) only when the decimal exponent is
// below -4 or at least 6.
func specFloat(x float64) string {
	switch {
	case math.IsInf(x, 1):
		return "+Inf"
	case math.IsInf(x, -1):
		return "-Inf"
	}
	s := strconv.FormatFloat(x, 'e', -1, 64)
	_, exp, _ := strings.Cut(s, "e")
	e, _ := strconv.Atoi(exp)
	if e < -4 || e >= 6 {
		return s
	}
	return strconv.FormatFloat(x, 'f', -1, 64)
}

// specHolder is the holder a lease token names: what comes before its
// last '|'.
func specHolder(token string) string {
	if i := strings.LastIndexByte(token, '|'); i >= 0 {
		return token[:i]
	}
	return ""
}

// specTagBytes encodes a tag value as LOG.md section 4 says: the bytes a
// group of lists, maps or bytes is told by.
func specTagBytes(b []byte, v any) []byte {
	switch x := v.(type) {
	case nil:
		return append(b, 0xc0)
	case bool:
		if x {
			return append(b, 0xc3)
		}
		return append(b, 0xc2)
	case int64:
		switch smallestSigned(x) {
		case 1:
			return append(b, byte(x))
		case 2:
			return append(b, 0xd0, byte(x))
		case 3:
			return binary.BigEndian.AppendUint16(append(b, 0xd1), uint16(x))
		case 5:
			return binary.BigEndian.AppendUint32(append(b, 0xd2), uint32(x))
		}
		return binary.BigEndian.AppendUint64(append(b, 0xd3), uint64(x))
	case uint64:
		return specTagBytes(b, specUint(x))
	case specUint:
		switch {
		case x <= math.MaxUint8:
			return append(b, 0xcc, byte(x))
		case x <= math.MaxUint16:
			return binary.BigEndian.AppendUint16(append(b, 0xcd), uint16(x))
		case x <= math.MaxUint32:
			return binary.BigEndian.AppendUint32(append(b, 0xce), uint32(x))
		}
		return binary.BigEndian.AppendUint64(append(b, 0xcf), uint64(x))
	case float64:
		return binary.BigEndian.AppendUint64(append(b, 0xcb), math.Float64bits(x))
	case string:
		return append(specHeader(b, 0xa0, 0xd9, len(x)), x...)
	case []byte:
		switch n := len(x); {
		case n <= math.MaxUint8:
			b = append(b, 0xc4, byte(n))
		case n <= math.MaxUint16:
			b = binary.BigEndian.AppendUint16(append(b, 0xc5), uint16(n))
		default:
			b = binary.BigEndian.AppendUint32(append(b, 0xc6), uint32(n))
		}
		return append(b, x...)
	case []any:
		b = specHeader(b, 0x90, 0xdc, len(x))
		for _, e := range x {
			b = specTagBytes(b, e)
		}
		return b
	case map[string]any:
		b = specHeader(b, 0x80, 0xde, len(x))
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			b = specTagBytes(specTagBytes(b, k), x[k])
		}
		return b
	}
	panic(fmt.Sprintf("not a tag value: %T", v))
}

// specHeader appends a str, array or map header in its smallest form:
// fix (from fix), then 8 bits (str only), 16 or 32 bits (from wide).
func specHeader(b []byte, fix, wide byte, n int) []byte {
	limit := 15
	if fix == 0xa0 {
		limit = 31
	}
	switch {
	case n <= limit:
		return append(b, fix|byte(n))
	case fix == 0xa0 && n <= math.MaxUint8:
		return append(b, 0xd9, byte(n))
	case fix == 0xa0 && n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xda), uint16(n))
	case fix == 0xa0:
		return binary.BigEndian.AppendUint32(append(b, 0xdb), uint32(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, wide), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, wide+1), uint32(n))
}
