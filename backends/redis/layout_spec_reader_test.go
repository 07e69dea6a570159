package redis_test

// A reader of a partition written from LAYOUT.md and backends/LOG.md
// alone: it reads the server's keys with plain go-redis commands, decodes
// records and snapshots with msgp's primitive readers (none of the
// engine's or the rules' decoders: it imports neither internal/rules nor
// internal/replica), and replays them by the documents' rules into rows
// and every task's consumption. layout_spec_test.go checks what it finds
// against what tq reports.

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"

	goredis "github.com/redis/go-redis/v9"
	"github.com/tinylib/msgp/msgp"
)

// ---- decoding (LOG.md sections 2 to 4, 6) ----

// sd reads msgpack values in order, keeping the first error.
type sd struct {
	b   []byte
	err error
}

func (d *sd) fail(err error) {
	if d.err == nil && err != nil {
		d.err = err
	}
}

func (d *sd) u() uint64 {
	if d.err != nil {
		return 0
	}
	v, b, err := msgp.ReadUint64Bytes(d.b)
	d.fail(err)
	if err == nil {
		d.b = b
	}
	return v
}

func (d *sd) i() int64 {
	if d.err != nil {
		return 0
	}
	v, b, err := msgp.ReadInt64Bytes(d.b)
	d.fail(err)
	if err == nil {
		d.b = b
	}
	return v
}

func (d *sd) s() string {
	if d.err != nil {
		return ""
	}
	v, b, err := msgp.ReadStringBytes(d.b)
	d.fail(err)
	if err == nil {
		d.b = b
	}
	return v
}

func (d *sd) bl() bool {
	if d.err != nil {
		return false
	}
	v, b, err := msgp.ReadBoolBytes(d.b)
	d.fail(err)
	if err == nil {
		d.b = b
	}
	return v
}

func (d *sd) f() float64 {
	if d.err != nil {
		return 0
	}
	v, b, err := msgp.ReadFloat64Bytes(d.b)
	d.fail(err)
	if err == nil {
		d.b = b
	}
	return v
}

func (d *sd) bin() []byte {
	if d.err != nil {
		return nil
	}
	v, b, err := msgp.ReadBytesBytes(d.b, nil)
	d.fail(err)
	if err == nil {
		d.b = b
	}
	return v
}

// arr reads an array header.
func (d *sd) arr() int {
	if d.err != nil {
		return 0
	}
	n, b, err := msgp.ReadArrayHeaderBytes(d.b)
	d.fail(err)
	if err == nil {
		d.b = b
		if uint32(len(b)) < n {
			d.fail(fmt.Errorf("array of %d in %d bytes", n, len(b)))
			return 0
		}
	}
	return int(n)
}

func (d *sd) mp() int {
	if d.err != nil {
		return 0
	}
	n, b, err := msgp.ReadMapHeaderBytes(d.b)
	d.fail(err)
	if err == nil {
		d.b = b
	}
	return int(n)
}

// null consumes a nil if one is next.
func (d *sd) null() bool {
	if d.err == nil && msgp.IsNil(d.b) {
		d.b = d.b[1:]
		return true
	}
	return false
}

func (d *sd) strs() []string {
	out := make([]string, d.arr())
	for k := range out {
		out[k] = d.s()
	}
	return out
}

func (d *sd) idx() []uint64 {
	out := make([]uint64, d.arr())
	for k := range out {
		out[k] = d.u()
	}
	return out
}

// srField is a field table entry.
type srField struct {
	dtype string
	shape []int64 // nil: a general value; empty: a 0-d tensor
	gen   uint64
	btag  string
}

func (d *sd) table() map[string]srField {
	n := d.mp()
	out := make(map[string]srField, n)
	for range n {
		name := d.s()
		if d.arr() != 4 {
			d.fail(fmt.Errorf("field %q: not 4 parts", name))
		}
		var f srField
		f.dtype = d.s()
		if !d.null() {
			f.shape = make([]int64, d.arr())
			for k := range f.shape {
				f.shape[k] = d.i()
			}
		}
		f.gen = d.u()
		f.btag = d.s()
		out[name] = f
	}
	return out
}

func (d *sd) tables() []map[string]srField {
	out := make([]map[string]srField, d.arr())
	for k := range out {
		out[k] = d.table()
	}
	return out
}

func (d *sd) tableRef(tables []map[string]srField) (map[string]srField, bool) {
	t := d.u()
	if t > uint64(len(tables)) {
		d.fail(fmt.Errorf("table %d of %d", t, len(tables)))
		return nil, false
	}
	if t == 0 {
		return nil, false
	}
	return tables[t-1], true
}

// tag reads a tag: nil, or a map of values of the types tq wrote
// (LOG.md section 4): signed and unsigned kept apart.
func (d *sd) tag() map[string]any {
	if d.null() {
		return nil
	}
	n := d.mp()
	out := make(map[string]any, n)
	for range n {
		k := d.s()
		out[k] = d.tagVal(1)
	}
	return out
}

func (d *sd) tagVal(depth int) any {
	if d.err != nil {
		return nil
	}
	switch msgp.NextType(d.b) {
	case msgp.NilType:
		d.null()
		return nil
	case msgp.BoolType:
		return d.bl()
	case msgp.IntType:
		return d.i()
	case msgp.UintType:
		return d.u()
	case msgp.Float64Type, msgp.Float32Type:
		return d.f()
	case msgp.StrType:
		return d.s()
	case msgp.BinType:
		v := d.bin()
		if v == nil {
			v = []byte{}
		}
		return v
	case msgp.ArrayType:
		if depth >= 64 {
			d.fail(fmt.Errorf("tag nested too deep"))
			return nil
		}
		out := make([]any, d.arr())
		for k := range out {
			out[k] = d.tagVal(depth + 1)
		}
		return out
	case msgp.MapType:
		if depth >= 64 {
			d.fail(fmt.Errorf("tag nested too deep"))
			return nil
		}
		n := d.mp()
		out := make(map[string]any, n)
		for range n {
			k := d.s()
			out[k] = d.tagVal(depth + 1)
		}
		return out
	}
	d.fail(fmt.Errorf("msgpack type %v in a tag", msgp.NextType(d.b)))
	return nil
}

// encTagVal is a tag value's encoding (LOG.md section 4), for group ids.
func srEncTag(b []byte, v any) []byte {
	switch x := v.(type) {
	case nil:
		return msgp.AppendNil(b)
	case bool:
		return msgp.AppendBool(b, x)
	case int64:
		return msgp.AppendInt64(b, x)
	case uint64:
		switch {
		case x <= math.MaxUint8:
			return append(b, 0xcc, byte(x))
		case x <= math.MaxUint16:
			return append(b, 0xcd, byte(x>>8), byte(x))
		case x <= math.MaxUint32:
			return append(b, 0xce, byte(x>>24), byte(x>>16), byte(x>>8), byte(x))
		}
		b = append(b, 0xcf)
		for s := 56; s >= 0; s -= 8 {
			b = append(b, byte(x>>s))
		}
		return b
	case float64:
		return msgp.AppendFloat64(b, x)
	case string:
		return msgp.AppendString(b, x)
	case []byte:
		return msgp.AppendBytes(b, x)
	case []any:
		b = msgp.AppendArrayHeader(b, uint32(len(x)))
		for _, e := range x {
			b = srEncTag(b, e)
		}
		return b
	case map[string]any:
		b = msgp.AppendMapHeader(b, uint32(len(x)))
		for _, k := range slices.Sorted(maps.Keys(x)) {
			b = msgp.AppendString(b, k)
			b = srEncTag(b, x[k])
		}
		return b
	}
	panic(fmt.Sprintf("tag value %T", v))
}

// ---- the state (LOG.md section 5) ----

const (
	srReady = iota
	srLeased
	srAcked
	srDead
	srDropped
)

type srGen struct {
	field      string
	next, pend uint64
	at, old    int64
	size       int64 // what the bytes count
	nsize      int64 // the newest reservation's size
}

func (g *srGen) has(gen uint64) bool {
	return gen < g.next && g.next-1-gen < 64 && g.pend>>(g.next-1-gen)&1 != 0
}

func (g *srGen) oldest() uint64 { return g.next - 1 - uint64(63-bits.LeadingZeros64(g.pend)) }

func (g *srGen) drop(gen uint64) bool {
	if !g.has(gen) {
		return false
	}
	if gen == g.oldest() {
		g.old = g.at
	}
	g.pend &^= 1 << (g.next - 1 - gen)
	return true
}

type srRow struct {
	key       string
	index     uint64
	committed bool
	held      bool
	fields    map[string]srField
	tag       map[string]any
	gens      []*srGen
}

func (r *srRow) gen(field string) *srGen {
	for _, g := range r.gens {
		if g.field == field {
			return g
		}
	}
	return nil
}

type srRef struct {
	index uint64
	field string
	gen   uint64
	at    int64
}

type srEntry struct {
	state      int
	deliveries int64
	token      string
	until      int64
	max        int64
}

type srSel struct {
	fields     []string
	gtag, gsep string
	gsize      int64
	stag       string
	sdrop      bool
}

func (s srSel) equal(o srSel) bool {
	return slices.Equal(s.fields, o.fields) && s.gtag == o.gtag && s.gsep == o.gsep && s.gsize == o.gsize &&
		s.stag == o.stag && s.sdrop == o.sdrop
}

type srClaim struct {
	task, token            string
	lease, rows, min, maxd int64
	batch                  bool
	ranks, rank            int64
	sel                    srSel
	floor                  float64
	custom                 bool
	units                  [][]uint64
	drop                   []uint64
	hold                   int64
	replaces               string
	raw                    []byte
}

type srBatch struct {
	token  string
	rows   []uint64
	units  [][]int64
	taken  []bool
	takers []string // per rank, the token of the claim that took its share
	end    int64
}

type srServed struct {
	until int64
	rows  []uint64
}

type srStanding struct {
	a     srClaim
	until int64
}

type srTask struct {
	entries  map[uint64]*srEntry
	indexed  bool
	sel      srSel
	parked   map[uint64]float64
	batches  []*srBatch
	standing []*srStanding
	served   map[string]srServed
	count    uint64 // acks (of a row not acked before) and drops applied: LOG.md's per-task count
}

type srState struct {
	now     int64
	seq     uint64
	rows    map[string]*srRow
	byIndex map[uint64]*srRow // committed rows
	far     []srRef
	orphans []srRef
	garbage int
	tasks   map[string]*srTask
	voids   map[uint64]int64
	undone  map[string]int64 // claim tokens a K undo named, with its time
	applied int              // entries applied
	// the capacity (section 5): bounds and the tasks to clear after
	capRows, capBytes int64
	clearAfter        []string
	blocks            []*srBlock // the live blocks, by base (section 5, Blocks)
	// What the log did with blocks, for the test: the keys of the rows
	// U records made, why each U that applied nothing did not, how many
	// Y records ended a block, and the live blocks the snapshot held.
	madeByU    []string
	refusedU   []string
	released   int
	snapBlocks []*srBlock
}

// srBlock is a live block: indexes base to base+n-1 for new rows of
// fields, which of them a U took, and at (its N's time, then its latest
// U's).
type srBlock struct {
	base, n uint64
	token   uint64 // its N's entry ID
	fields  []string
	at      int64
	taken   []bool
}

// left counts the indexes of b no U took.
func (b *srBlock) left() int {
	n := 0
	for _, t := range b.taken {
		if !t {
			n++
		}
	}
	return n
}

// srIncreasing: at least one name, in increasing byte order (so none
// twice), as a block's fields must be.
func srIncreasing(fields []string) bool {
	if len(fields) == 0 {
		return false
	}
	for k := 1; k < len(fields); k++ {
		if fields[k-1] >= fields[k] {
			return false
		}
	}
	return true
}

// usage is what the partition holds (section 5, Capacity): committed and
// held rows, and the sizes of every row's fields.
func (p *srState) usage() (rows, bytes int64) {
	for _, r := range p.rows {
		if r.committed || r.held {
			rows++
		}
		for _, g := range r.gens {
			bytes += g.size
		}
	}
	return rows, bytes
}

// lostReservation ends r's hold when a record took a pending reservation
// of it and left it uncommitted with none.
func (r *srRow) lostReservation() {
	if !r.held || r.committed {
		return
	}
	for _, g := range r.gens {
		if g.pend != 0 {
			return
		}
	}
	r.held = false
	for _, g := range r.gens {
		g.size = 0
	}
}

// clearAfterConsumed removes, as a D, the rows of idx every task to clear
// after has acked or dropped ("Clear after").
func (p *srState) clearAfterConsumed(idx []uint64) {
	var keys []string
	for _, i := range idx {
		r := p.byIndex[i]
		if r == nil || len(p.clearAfter) == 0 {
			continue
		}
		all := true
		for _, name := range p.clearAfter {
			t := p.tasks[name]
			var e *srEntry
			if t != nil {
				e = t.entries[i]
			}
			if e == nil || e.state != srAcked && e.state != srDropped {
				all = false
			}
		}
		if all && !slices.Contains(keys, r.key) {
			keys = append(keys, r.key)
		}
	}
	if len(keys) > 0 && p.remove(keys) {
		p.seq++
	}
}

func newSR() *srState {
	return &srState{rows: map[string]*srRow{}, byIndex: map[uint64]*srRow{}, tasks: map[string]*srTask{}, voids: map[uint64]int64{}, undone: map[string]int64{}}
}

func (p *srState) task(name string) *srTask {
	t := p.tasks[name]
	if t == nil {
		t = &srTask{entries: map[uint64]*srEntry{}, parked: map[uint64]float64{}, served: map[string]srServed{}}
		p.tasks[name] = t
	}
	return t
}

// seen is an entry read at time now: lazy expiry.
func srSeen(e srEntry, now int64) srEntry {
	switch {
	case e.state == srLeased && now >= e.until:
		e.token, e.until, e.state = "", 0, srReady
		if e.max > 0 && e.deliveries >= e.max {
			e.state = srDead
		}
	case e.state == srReady && e.until != 0 && now >= e.until:
		e.until = 0
	}
	return e
}

func entryClaimable(e *srEntry, now int64) bool {
	if e == nil {
		return true
	}
	s := srSeen(*e, now)
	return s.state == srReady && s.until == 0
}

func (r *srRow) hasFields(fields []string) bool {
	for _, f := range fields {
		if _, ok := r.fields[f]; !ok {
			return false
		}
	}
	return true
}

// claimable: the task's ready set.
func (p *srState) claimable(t *srTask, i uint64) bool {
	r := p.byIndex[i]
	if r == nil || !entryClaimable(t.entries[i], p.now) || !r.hasFields(t.sel.fields) {
		return false
	}
	_, parked := t.parked[i]
	return !parked
}

func (p *srState) readySet(t *srTask) []uint64 {
	var out []uint64
	for i := range p.byIndex {
		if p.claimable(t, i) {
			out = append(out, i)
		}
	}
	slices.Sort(out)
	return out
}

func srTagNum(v any) (float64, bool) {
	switch x := v.(type) {
	case int64:
		return float64(x), true
	case uint64:
		return float64(x), true
	case float64:
		return x, !math.IsNaN(x)
	}
	return 0, false
}

func (p *srState) groupOf(t *srTask, r *srRow) (string, bool) {
	if t.sel.gtag != "" {
		v, ok := r.tag[t.sel.gtag]
		if !ok || v == nil {
			return "", false
		}
		switch x := v.(type) {
		case string:
			return "s" + x, true
		case int64:
			return "i" + strconv.FormatInt(x, 10), true
		case uint64:
			return "u" + strconv.FormatUint(x, 10), true
		case float64:
			return "f" + strconv.FormatUint(math.Float64bits(x), 16), true
		case bool:
			return "b" + strconv.FormatBool(x), true
		}
		return "t" + string(srEncTag(nil, v)), true
	}
	k := strings.LastIndex(r.key, t.sel.gsep)
	if k < 0 {
		return "", false
	}
	return "k" + r.key[:k], true
}

// groupUnits are the units of every complete group, by first row.
func (p *srState) groupUnits(t *srTask) [][]uint64 {
	members := map[string][]uint64{}
	for _, i := range p.readySet(t) {
		if id, ok := p.groupOf(t, p.byIndex[i]); ok {
			members[id] = append(members[id], i)
		}
	}
	var units [][]uint64
	for _, m := range members {
		for k := 0; k+int(t.sel.gsize) <= len(m); k += int(t.sel.gsize) {
			units = append(units, m[k:k+int(t.sel.gsize)])
		}
	}
	slices.SortFunc(units, func(a, b []uint64) int { return srCompare(a[0], b[0]) })
	return units
}

func srCompare(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// claim applies a Q; it reports whether it leased (and what, and until).
func (p *srState) claim(a *srClaim) (leased bool, token string, until int64, rows []uint64) {
	now := p.now
	if _, undone := p.undone[a.token]; undone { // Q step 0
		return false, "", 0, nil
	}
	t := p.task(a.task)
	if !t.indexed || !t.sel.equal(a.sel) {
		t.indexed, t.sel, t.parked = true, a.sel, map[uint64]float64{}
	}
	if a.replaces != "" {
		p.unwait(t, a.replaces, nil)
	}
	if a.batch {
		held := func(b *srBatch, i uint64) *srEntry {
			if e := t.entries[i]; e != nil && e.state == srLeased && e.token == b.token {
				return e
			}
			return nil
		}
		t.batches = slices.DeleteFunc(t.batches, func(b *srBatch) bool {
			return b.end <= now && !slices.ContainsFunc(b.rows, func(i uint64) bool { e := held(b, i); return e != nil && now < e.until })
		})
		for _, b := range t.batches {
			if b.taken[a.rank] {
				continue
			}
			b.taken[a.rank] = true
			b.takers[a.rank] = a.token
			b.end = max(b.end, now+a.lease)
			for _, i := range b.rows {
				if e := held(b, i); e != nil {
					e.until = now + a.lease
				}
			}
			return true, b.token, now + a.lease, b.rows
		}
	}
	var drops []uint64
	drops = append(drops, a.drop...)
	if t.sel.stag != "" {
		for i, v := range t.parked {
			if v < a.floor {
				continue
			}
			delete(t.parked, i)
			if r := p.byIndex[i]; r != nil {
				if nv, ok := srTagNum(r.tag[t.sel.stag]); ok && nv < a.floor {
					t.parked[i] = nv
				}
			}
		}
		for _, i := range p.readySet(t) {
			v, ok := srTagNum(p.byIndex[i].tag[t.sel.stag])
			if !ok || v >= a.floor {
				continue
			}
			if t.sel.sdrop {
				drops = append(drops, i)
			} else {
				t.parked[i] = v
			}
		}
	}
	var dropped []uint64
	for _, i := range drops {
		if e := t.entries[i]; p.byIndex[i] != nil && entryClaimable(e, now) {
			ne := &srEntry{state: srDropped}
			if e != nil {
				ne.deliveries = e.deliveries
			}
			t.entries[i] = ne
			t.count++
			dropped = append(dropped, i)
		}
	}
	if slices.Contains(p.clearAfter, a.task) {
		p.clearAfterConsumed(dropped)
	}
	var units [][]uint64
	switch {
	case a.custom:
		units = a.units
	case t.sel.gsize > 0:
		units = p.groupUnits(t)
		units = units[:min(len(units), int(a.rows/t.sel.gsize))]
	default:
		for _, i := range p.readySet(t) {
			if int64(len(units)) == a.rows {
				break
			}
			units = append(units, []uint64{i})
		}
	}
	var take []uint64
	var bounds []int
	taken := map[uint64]bool{}
	for _, u := range units {
		if int64(len(take)+len(u)) > a.rows {
			continue
		}
		if a.custom {
			ok := true
			for k, i := range u {
				if !p.claimable(t, i) || taken[i] || slices.Contains(u[:k], i) {
					ok = false
				}
			}
			if !ok {
				continue
			}
		}
		for _, i := range u {
			taken[i] = true
		}
		take = append(take, u...)
		bounds = append(bounds, len(take))
		if int64(len(take)) == a.rows {
			break
		}
	}
	if int64(len(take)) < a.min {
		if a.hold > 0 && !a.batch { // a claim with a batch never stands
			st := &srStanding{a: *a, until: now + a.hold}
			st.a.hold, st.a.replaces = 0, ""
			t.standing = append(t.standing, st)
		}
		return false, "", 0, nil
	}
	until = now + a.lease
	for _, i := range take {
		ne := &srEntry{state: srLeased, token: a.token, until: until, max: a.maxd}
		if old := t.entries[i]; old != nil {
			ne.deliveries = old.deliveries
		}
		ne.deliveries++
		t.entries[i] = ne
	}
	if a.batch && a.ranks > 1 {
		b := &srBatch{token: a.token, rows: take, taken: make([]bool, a.ranks), takers: make([]string, a.ranks), end: until}
		start := 0
		for _, end := range bounds {
			var u []int64
			for k := start; k < end; k++ {
				u = append(u, int64(k))
			}
			b.units = append(b.units, u)
			start = end
		}
		b.taken[a.rank] = true
		b.takers[a.rank] = a.token
		t.batches = append(t.batches, b)
		p.seq++
	}
	return true, a.token, until, take
}

func (p *srState) mayLease(t *srTask, a *srClaim) bool {
	if t.sel.gsize > 0 {
		return p.groupUnitsAll(t)*t.sel.gsize >= a.min
	}
	return int64(len(p.readySet(t))+len(t.parked)) >= a.min
}

// groupUnitsAll counts the units of a complete group's worth of rows of
// every group.
func (p *srState) groupUnitsAll(t *srTask) int64 {
	count := map[string]int64{}
	for _, i := range p.readySet(t) {
		if id, ok := p.groupOf(t, p.byIndex[i]); ok {
			count[id]++
		}
	}
	var units int64
	for _, n := range count {
		units += n / t.sel.gsize
	}
	return units
}

// serve fulfils standing claims (LOG.md section 5, "Standing claims").
func (p *srState) serve() {
	for _, name := range slices.Sorted(maps.Keys(p.tasks)) {
		t := p.tasks[name]
		if len(t.standing) == 0 && len(t.served) == 0 {
			continue
		}
		maps.DeleteFunc(t.served, func(_ string, s srServed) bool { return s.until <= p.now })
		t.standing = slices.DeleteFunc(t.standing, func(s *srStanding) bool { return s.until <= p.now })
		if len(t.standing) == 0 || !t.indexed {
			continue
		}
		for k := 0; k < len(t.standing); k++ {
			s := t.standing[k]
			if s.a.batch || !p.mayLease(t, &s.a) {
				continue
			}
			leased, _, until, rows := p.claim(&s.a)
			if !leased {
				continue
			}
			// Filed under the standing claim's own token (the one its
			// unwait and a replacing claim name).
			t.served[s.a.token] = srServed{until: until, rows: rows}
			t.standing = slices.Delete(t.standing, k, k+1)
			k--
		}
	}
}

// unwait applies an unwait of token with indexes idx to t.
func (p *srState) unwait(t *srTask, token string, idx []uint64) {
	t.standing = slices.DeleteFunc(t.standing, func(s *srStanding) bool { return s.a.token == token })
	sv, ok := t.served[token]
	var back []uint64
	if ok {
		delete(t.served, token)
		back = append(back, sv.rows...)
	}
	back = append(back, idx...)
	bumped := ok
	for _, i := range back {
		e := t.entries[i]
		if e == nil || e.state != srLeased || e.token != token {
			continue
		}
		bumped = true
		if e.deliveries <= 1 {
			delete(t.entries, i)
		} else {
			t.entries[i] = &srEntry{state: srReady, deliveries: e.deliveries - 1, token: token, max: e.max}
		}
	}
	if bumped {
		p.seq++
	}
}

func (p *srState) settle(task string, op uint64, token string, idx []uint64, delay int64) {
	now := p.now
	t := p.task(task)
	if op == 6 {
		p.unwait(t, token, idx)
		return
	}
	if op == 8 { // undo: an unwait of every row leased to the token, which is undone
		var leased []uint64
		for i, e := range t.entries {
			if e.state == srLeased && e.token == token {
				leased = append(leased, i)
			}
		}
		slices.SortFunc(leased, srCompare)
		p.unwait(t, token, leased)
		p.undone[token] = now
		return
	}
	if op == 7 { // end batch: the open batch of the token is forgotten
		n := len(t.batches)
		if t.batches = slices.DeleteFunc(t.batches, func(b *srBatch) bool { return b.token == token }); len(t.batches) < n {
			p.seq++
		}
		return
	}
	changed := false
	var done []uint64 // acked or dropped
	for _, i := range idx {
		e := t.entries[i]
		switch op {
		case 1:
			if e != nil && (e.state == srLeased || e.state == srAcked) && e.token == token {
				if e.state != srAcked {
					t.count++
				}
				t.entries[i] = &srEntry{state: srAcked, deliveries: e.deliveries, token: e.token, max: e.max}
				done = append(done, i)
			}
		case 2:
			if e != nil && e.token == token && e.state == srLeased {
				ne := &srEntry{state: srReady, deliveries: e.deliveries, token: token, max: e.max}
				if e.max > 0 && e.deliveries >= e.max {
					ne.state = srDead
				} else if delay > 0 {
					ne.until = now + delay
				}
				t.entries[i] = ne
				changed = true
			}
		case 3:
			if e != nil && e.state == srLeased && e.token == token {
				e.until = now + delay
			}
		case 4:
			if e != nil && srSeen(*e, now).state == srDead {
				delete(t.entries, i)
				changed = true
			}
		case 5:
			if p.byIndex[i] != nil {
				if e == nil || srSeen(*e, now).state == srReady || srSeen(*e, now).state == srDead {
					ne := &srEntry{state: srDropped}
					if e != nil {
						ne.deliveries = e.deliveries
					}
					t.entries[i] = ne
					t.count++
					done = append(done, i)
				}
			}
		}
	}
	if changed {
		p.seq++
	}
	if slices.Contains(p.clearAfter, task) {
		p.clearAfterConsumed(done)
	}
}

// retire moves a removed row's pending reservations to the orphans.
func (p *srState) retire(r *srRow) {
	for _, g := range r.gens {
		for m := g.pend; m != 0; m &= m - 1 {
			gen := g.next - 1 - uint64(bits.TrailingZeros64(m))
			at := g.at
			if gen == g.oldest() {
				at = g.old
			}
			p.orphans = append(p.orphans, srRef{r.index, g.field, gen, at})
		}
	}
	p.far = slices.DeleteFunc(p.far, func(o srRef) bool {
		if o.index == r.index {
			p.orphans = append(p.orphans, o)
			return true
		}
		return false
	})
}

// remove removes keys' rows and reports whether a committed one went.
func (p *srState) remove(keys []string) bool {
	removed := false
	for _, k := range keys {
		r := p.rows[k]
		if r == nil {
			continue
		}
		if r.committed {
			removed = true
			p.garbage += len(r.fields)
			delete(p.byIndex, r.index)
			for _, t := range p.tasks {
				delete(t.entries, r.index)
				delete(t.parked, r.index)
			}
		}
		p.retire(r)
		delete(p.rows, k)
	}
	return removed
}

func (p *srState) farIndex(index uint64, field string, gen uint64) int {
	return slices.IndexFunc(p.far, func(o srRef) bool { return o.index == index && o.field == field && o.gen == gen })
}

// applyEntry applies one log entry (LOG.md section 1).
func (p *srState) applyEntry(id uint64, t int64, base uint64, data []byte) {
	p.applied++
	if t > p.now {
		p.now = t
	}
	maps.DeleteFunc(p.voids, func(_ uint64, at int64) bool { return p.now-at > 600_000_000 })
	maps.DeleteFunc(p.undone, func(_ string, at int64) bool { return p.now-at > 600_000_000 })
	if _, void := p.voids[id]; void {
		return
	}
	p.applyRecord(id, base, data)
	p.serve()
}

func (p *srState) applyRecord(id, base uint64, data []byte) {
	if len(data) == 0 {
		return
	}
	d := &sd{b: data[1:]}
	now := p.now
	switch data[0] {
	case 'P':
		n := d.u()
		fields := d.strs()
		keys := d.strs()
		if d.err != nil {
			return
		}
		var sizes [][]int64 // per field, per key; nil: none
		if len(d.b) > 0 {
			var ok bool
			if sizes, ok = d.sizes(len(keys), len(fields)); !ok {
				return
			}
		}
		p.prepare(base, n, keys, fields, sizes)
	case 'C':
		ups := d.updates()
		if d.err != nil {
			return
		}
		p.commit(ups)
	case 'N':
		n, fields := d.u(), d.strs()
		if d.err != nil || n < 1 || n > 4096 || !srIncreasing(fields) || base+n < base {
			return
		}
		if slices.ContainsFunc(p.blocks, func(b *srBlock) bool { return base < b.base+b.n && b.base < base+n }) {
			return // overlapping a live block: its writer had no indexes reserved
		}
		if p.capBytes > 0 || len(p.blocks) >= 1024 {
			return // refused
		}
		// Kept by base: a block may reach the log below a live one.
		k, _ := slices.BinarySearchFunc(p.blocks, base, func(b *srBlock, x uint64) int { return cmp.Compare(b.base, x) })
		p.blocks = slices.Insert(p.blocks, k, &srBlock{base: base, n: n, token: id, fields: fields, at: now, taken: make([]bool, n)})
	case 'U':
		p.putNew(d)
	case 'Y':
		first, token, written := d.u(), d.u(), d.idx()
		if d.err != nil {
			return
		}
		k := slices.IndexFunc(p.blocks, func(b *srBlock) bool { return b.base == first && b.token == token })
		if k < 0 {
			return
		}
		b := p.blocks[k]
		for off, taken := range b.taken {
			if !taken && slices.Contains(written, b.base+uint64(off)) {
				p.garbage += len(b.fields)
			}
		}
		p.blocks = slices.Delete(p.blocks, k, k+1)
		p.released++
	case 'D':
		keys := d.strs()
		if d.err == nil && p.remove(keys) {
			p.seq++
		}
	case 'X':
		var keys []string
		for _, r := range p.rows {
			keys = append(keys, r.key)
		}
		p.remove(keys)
		p.tasks = map[string]*srTask{}
		p.seq++
	case 'A':
		age := d.i()
		if d.err != nil {
			return
		}
		cutoff := now - age
		for _, r := range p.rows {
			took := false
			for _, g := range r.gens {
				switch {
				case g.pend == 0:
				case g.at <= cutoff:
					p.garbage += bits.OnesCount64(g.pend)
					g.pend = 0
					took = true
				case g.old <= cutoff:
					g.drop(g.oldest())
					p.garbage++
					took = true
				}
			}
			if took {
				r.lostReservation()
			}
		}
		p.far = slices.DeleteFunc(p.far, func(o srRef) bool { return o.at <= cutoff })
		p.orphans = slices.DeleteFunc(p.orphans, func(o srRef) bool { return o.at <= cutoff })
		p.blocks = slices.DeleteFunc(p.blocks, func(b *srBlock) bool { // idle since the cutoff: ended
			if b.at > cutoff {
				return false
			}
			p.garbage += b.left() * len(b.fields)
			return true
		})
	case 'W', 'B':
		n := d.arr()
		parts := 3
		if data[0] == 'B' {
			parts = 4
		}
		refs := make([]srRef, n)
		for k := range refs {
			if d.arr() != parts {
				d.fail(fmt.Errorf("ref of wrong size"))
			}
			refs[k] = srRef{index: d.u(), field: d.s(), gen: d.u()}
			if parts == 4 {
				d.s()
			}
		}
		if d.err != nil {
			return
		}
		for _, ref := range refs {
			p.orphans = slices.DeleteFunc(p.orphans, func(o srRef) bool {
				return o.index == ref.index && o.field == ref.field && o.gen == ref.gen
			})
			if j := p.farIndex(ref.index, ref.field, ref.gen); j >= 0 {
				p.far = slices.Delete(p.far, j, j+1)
			}
			for _, r := range p.rows {
				if r.index == ref.index {
					if g := r.gen(ref.field); g != nil && g.drop(ref.gen) {
						r.lostReservation()
					}
				}
			}
		}
	case 'F':
		ids := d.idx()
		if d.err != nil {
			return
		}
		for _, id := range ids {
			p.voids[id] = now
		}
	case 'Q':
		a := readSRClaim(d)
		if d.err != nil || !a.valid() {
			return
		}
		p.claim(a)
	case 'K':
		task, op, token, idx, delay := d.s(), d.u(), d.s(), d.idx(), d.i()
		if d.err == nil && len(d.b) > 0 {
			d.s() // a nack's reason: this reader keeps no reasons
		}
		if d.err != nil || task == "" || op < 1 || op > 8 || (op == 4 || op == 5) != (token == "") ||
			op == 3 && delay <= 0 || delay < 0 || op == 8 && len(idx) > 0 {
			return
		}
		p.settle(task, op, token, idx, delay)
	case 'E':
		fields, keys := d.strs(), d.strs()
		if d.err != nil || len(fields) == 0 || len(keys) == 0 {
			return
		}
		fields = slices.Compact(slices.Sorted(slices.Values(fields)))
		for _, k := range keys {
			r := p.rows[k]
			if r == nil {
				continue
			}
			took := false
			for _, f := range fields {
				g := r.gen(f)
				if g == nil {
					continue
				}
				for m := g.pend; m != 0; m &= m - 1 {
					gen := g.next - 1 - uint64(bits.TrailingZeros64(m))
					at := g.at
					if gen == g.oldest() {
						at = g.old
					}
					p.orphans = append(p.orphans, srRef{r.index, f, gen, at})
				}
				took = took || g.pend != 0
				g.pend, g.size = 0, 0
			}
			p.far = slices.DeleteFunc(p.far, func(o srRef) bool {
				if o.index == r.index && slices.Contains(fields, o.field) {
					p.orphans = append(p.orphans, o)
					return true
				}
				return false
			})
			if took {
				r.lostReservation()
			}
			if !r.committed {
				continue
			}
			nf := maps.Clone(r.fields)
			for _, f := range fields {
				if _, ok := nf[f]; ok {
					delete(nf, f)
					p.garbage++
				}
			}
			r.fields = nf
			for _, t := range p.tasks {
				if !r.hasFields(t.sel.fields) {
					delete(t.parked, r.index)
				}
			}
		}
	case 'L':
		rows, bytes, tasks := d.i(), d.i(), d.strs()
		if d.err != nil || rows < 0 || bytes < 0 || len(tasks) > 16 {
			return
		}
		for k, name := range tasks {
			if name == "" || slices.Contains(tasks[:k], name) {
				return
			}
		}
		p.capRows, p.capBytes, p.clearAfter = rows, bytes, tasks
		p.seq++
		if len(tasks) > 0 && p.tasks[tasks[0]] != nil {
			var idx []uint64
			for i, e := range p.tasks[tasks[0]].entries {
				if e.state == srAcked || e.state == srDropped {
					idx = append(idx, i)
				}
			}
			slices.SortFunc(idx, srCompare)
			p.clearAfterConsumed(idx)
		}
	case 'R':
		task := d.s()
		all := d.null()
		var idx []uint64
		if !all {
			idx = d.idx()
		}
		if d.err != nil || task == "" || !all && len(idx) == 0 {
			return
		}
		t := p.tasks[task]
		if t == nil {
			return
		}
		if all {
			t.entries = map[uint64]*srEntry{}
			t.parked = map[uint64]float64{}
		} else {
			for _, i := range idx {
				delete(t.entries, i)
			}
		}
		t.batches = nil
		p.seq++
	}
}

// sizes reads a P's or a U's cells' sizes of nk keys and nf fields (LOG.md
// section 2): an array of one value per field, either one size for every
// key or an array of one per key; false when they are not that, or
// negative, or more than 2^26 cells.
func (d *sd) sizes(nk, nf int) ([][]int64, bool) {
	if d.arr() != nf || nk*nf > 1<<26 {
		return nil, false
	}
	sizes := make([][]int64, 0, nf)
	for range nf {
		col := make([]int64, nk)
		if len(d.b) > 0 && d.b[0]&0xf0 == 0x90 || len(d.b) > 0 && (d.b[0] == 0xdc || d.b[0] == 0xdd) {
			if d.arr() != nk {
				return nil, false
			}
			for k := range col {
				col[k] = d.i()
			}
		} else {
			v := d.i()
			for k := range col {
				col[k] = v
			}
		}
		if slices.ContainsFunc(col, func(v int64) bool { return v < 0 }) {
			return nil, false
		}
		sizes = append(sizes, col)
	}
	return sizes, d.err == nil
}

// srUpdate is an update of a C (or a U).
type srUpdate struct {
	key    string
	index  uint64
	fields map[string]srField // nil: the update names no table
	tag    map[string]any
}

// updates reads a C's body: the field tables, then the updates, flat.
func (d *sd) updates() []srUpdate {
	tables := d.tables()
	ups := make([]srUpdate, d.arr())
	for k := range ups {
		ups[k].key = d.s()
		ups[k].index = d.u()
		ups[k].fields, _ = d.tableRef(tables)
		ups[k].tag = d.tag()
	}
	return ups
}

// prepare applies a P of keys and fields with sizes (per field, per key;
// nil: none), new keys taking indexes from base on, at most n of them
// (LOG.md section 5, P); it reports whether it applied.
func (p *srState) prepare(base, n uint64, keys, fields []string, sizes [][]int64) bool {
	now := p.now
	fresh := 0
	for _, k := range keys {
		if p.rows[k] == nil {
			fresh++
		}
	}
	if uint64(fresh) > n {
		return false
	}
	if p.capRows > 0 || p.capBytes > 0 {
		var growth int64
		for k, key := range keys {
			for j, f := range fields {
				var s int64
				if sizes != nil {
					s = sizes[j][k]
				}
				if r := p.rows[key]; r != nil {
					if g := r.gen(f); g != nil {
						s -= min(s, g.size)
					}
				}
				growth += s
			}
		}
		rows, bytes := p.usage()
		if p.capRows > 0 && fresh > 0 && rows+int64(fresh) > p.capRows || p.capBytes > 0 && growth > 0 && bytes+growth > p.capBytes {
			return false // full
		}
	}
	for k, key := range keys {
		r := p.rows[key]
		if r == nil {
			r = &srRow{key: key, index: base, held: true}
			base++
			p.rows[key] = r
		}
		for j, f := range fields {
			g := r.gen(f)
			if g == nil {
				g = &srGen{field: f}
				r.gens = append(r.gens, g)
			}
			g.nsize = 0
			if sizes != nil {
				g.nsize = sizes[j][k]
			}
			g.size = max(g.size, g.nsize)
			switch {
			case g.pend == 0:
				g.old = now
			case g.pend>>63 != 0:
				p.far = append(p.far, srRef{r.index, f, g.next - 64, g.old})
				g.old = g.at
			}
			g.next++
			g.pend = g.pend<<1 | 1
			g.at = now
		}
	}
	return true
}

// commit applies a C of ups (LOG.md section 5, C); it reports whether it
// applied.
func (p *srState) commit(ups []srUpdate) bool {
	if len(ups) == 0 {
		return false
	}
	for _, u := range ups {
		r := p.rows[u.key]
		if r == nil || r.index != u.index {
			return false
		}
		for f, fi := range u.fields {
			g := r.gen(f)
			if g == nil {
				return false
			}
			if !g.has(fi.gen) && p.farIndex(r.index, f, fi.gen) < 0 && !(r.committed && r.fields[f].gen == fi.gen && srHasKey(r.fields, f)) {
				return false
			}
		}
	}
	for _, u := range ups {
		r := p.rows[u.key]
		was := r.committed
		r.fields = maps.Clone(r.fields) // tables are shared: copy on write
		for _, f := range slices.Sorted(maps.Keys(u.fields)) {
			fi := u.fields[f]
			if g := r.gen(f); !g.drop(fi.gen) {
				if j := p.farIndex(r.index, f, fi.gen); j >= 0 {
					p.far = slices.Delete(p.far, j, j+1)
				}
			} else if fi.gen == g.next-1 {
				g.size = g.nsize // its newest write committed
			}
			old, had := r.fields[f]
			switch {
			case had && old.gen > fi.gen:
				p.garbage++
				continue
			case had && old.gen != fi.gen:
				p.garbage++
			}
			if r.fields == nil {
				r.fields = map[string]srField{}
			}
			r.fields[f] = fi
		}
		if u.tag != nil {
			if len(r.tag) == 0 {
				r.tag = u.tag
			} else {
				merged := maps.Clone(r.tag)
				maps.Copy(merged, u.tag)
				r.tag = merged
			}
		}
		r.committed, r.held = true, false
		if r.fields == nil {
			r.fields = map[string]srField{}
		}
		p.byIndex[r.index] = r
		if was {
			for _, t := range p.tasks {
				delete(t.parked, r.index)
			}
		}
	}
	p.seq++
	return true
}

// blockAt is the live block holding index, or nil.
func (p *srState) blockAt(index uint64) *srBlock {
	for _, b := range p.blocks {
		if index >= b.base && index < b.base+b.n {
			return b
		}
	}
	return nil
}

// putNew applies a U (LOG.md sections 2 and 5, Blocks): a P of the
// updates' keys at indexes base on with generation 0 of each field, then
// a C of the updates, or nothing (noted in refusedU).
func (p *srState) putNew(d *sd) {
	base, token := d.u(), d.u()
	fields := d.strs()
	// The sizes come before the updates they count: keep their bytes and
	// read them once the updates are read.
	var rawSizes []byte
	if !d.null() && d.err == nil {
		rest, err := msgp.Skip(d.b)
		d.fail(err)
		if err == nil {
			rawSizes, d.b = d.b[:len(d.b)-len(rest)], rest
		}
	}
	ups := d.updates()
	if d.err != nil {
		p.refusedU = append(p.refusedU, "malformed")
		return
	}
	var sizes [][]int64
	if rawSizes != nil {
		var ok bool
		if sizes, ok = (&sd{b: rawSizes}).sizes(len(ups), len(fields)); !ok {
			p.refusedU = append(p.refusedU, "malformed")
			return
		}
	}
	// What its writer could not have written (section 2).
	malformed := len(ups) > 4096 || len(ups) > 0 && len(fields) == 0
	for k, f := range fields {
		malformed = malformed || slices.Contains(fields[:k], f)
	}
	keys := make([]string, len(ups))
	for k, u := range ups {
		malformed = malformed || slices.Contains(keys[:k], u.key) || u.index != base+uint64(k) || len(u.fields) != len(fields)
		for _, f := range fields {
			fi, ok := u.fields[f]
			malformed = malformed || !ok || fi.gen != 0
		}
		keys[k] = u.key
	}
	if malformed {
		p.refusedU = append(p.refusedU, "malformed")
		return
	}
	if len(ups) == 0 {
		return
	}
	// Refused (section 5, U).
	last := base + uint64(len(ups)) - 1
	b := p.blockAt(base)
	switch {
	case slices.ContainsFunc(keys, func(k string) bool { return p.rows[k] != nil }):
		p.refusedU = append(p.refusedU, "a key has a row")
		return
	case b == nil || b.token != token || last >= b.base+b.n || slices.Contains(b.taken[base-b.base:last-b.base+1], true) ||
		slices.ContainsFunc(fields, func(f string) bool { return !slices.Contains(b.fields, f) }):
		p.refusedU = append(p.refusedU, "not a live block's untaken indexes and fields")
		return
	case p.capBytes > 0:
		p.refusedU = append(p.refusedU, "the capacity bounds bytes")
		return
	}
	if rows, _ := p.usage(); p.capRows > 0 && rows+int64(len(ups)) > p.capRows {
		p.refusedU = append(p.refusedU, "full")
		return
	}
	if !p.prepare(base, uint64(len(ups)), keys, fields, sizes) || !p.commit(ups) {
		p.refusedU = append(p.refusedU, "the reader failed to apply a U it checked")
		return
	}
	for i := base; i <= last; i++ {
		b.taken[i-b.base] = true
	}
	b.at = p.now
	if b.left() == 0 {
		p.blocks = slices.DeleteFunc(p.blocks, func(o *srBlock) bool { return o == b })
	}
	p.madeByU = append(p.madeByU, keys...)
}

func srHasKey(m map[string]srField, k string) bool { _, ok := m[k]; return ok }

func readSRClaim(d *sd) *srClaim {
	start := d.b
	a := &srClaim{}
	a.task, a.token, a.lease, a.rows, a.min, a.maxd = d.s(), d.s(), d.i(), d.i(), d.i(), d.i()
	if !d.null() {
		if d.arr() != 2 {
			d.fail(fmt.Errorf("batch not of 2"))
		}
		a.batch, a.ranks, a.rank = true, d.i(), d.i()
	}
	a.sel.fields = d.strs()
	a.sel.gtag, a.sel.gsep, a.sel.gsize, a.sel.stag, a.sel.sdrop = d.s(), d.s(), d.i(), d.s(), d.bl()
	a.floor, a.custom = d.f(), d.bl()
	a.units = make([][]uint64, d.arr())
	for k := range a.units {
		a.units[k] = d.idx()
	}
	a.drop = d.idx()
	a.hold, a.replaces = d.i(), d.s()
	a.raw = start[:len(start)-len(d.b)]
	return a
}

func (a *srClaim) valid() bool {
	const most = math.MaxInt32
	switch {
	case a.task == "" || a.token == "", a.lease <= 0, a.rows < 1, a.min < 1 || a.min > a.rows, a.maxd < 0, a.hold < 0,
		a.batch && (a.ranks < 1 || a.rank < 0 || a.rank >= a.ranks),
		a.sel.gsize < 0, a.sel.gsize > 0 && (a.sel.gtag == "") == (a.sel.gsep == ""), a.sel.gsize > a.rows,
		a.rows > most || a.min > most || a.maxd > most || a.sel.gsize > most:
		return false
	}
	return true
}

// restoreSR decodes a snapshot (LOG.md section 6).
func restoreSR(b []byte) (*srState, error) {
	if len(b) == 0 || b[0] != 'S' {
		return nil, fmt.Errorf("not a snapshot")
	}
	d := &sd{b: b[1:]}
	p := newSR()
	tables := d.tables()
	p.now, p.seq = d.i(), d.u()
	view := func(r *srRow) {
		if d.null() {
			return
		}
		parts := d.arr()
		if parts != 2 && parts != 3 {
			d.fail(fmt.Errorf("view not of 2 or 3"))
		}
		var ok bool
		r.fields, ok = d.tableRef(tables)
		if !ok {
			d.fail(fmt.Errorf("committed row without a table"))
		}
		r.tag = d.tag()
		if parts == 3 {
			d.i() // the first commit's time: group deadlines, which this reader does not apply
		}
		r.committed = true
	}
	nr := d.arr()
	for range nr {
		r := &srRow{key: d.s(), index: d.u()}
		view(r)
		ng := d.arr()
		for range ng {
			parts := d.arr()
			if parts != 5 && parts != 7 {
				d.fail(fmt.Errorf("gens not of 5 or 7"))
			}
			g := &srGen{field: d.s(), next: d.u(), pend: d.u(), at: d.i(), old: d.i()}
			if parts == 7 {
				g.size, g.nsize = d.i(), d.i()
			}
			r.gens = append(r.gens, g)
		}
		p.rows[r.key] = r
		if r.committed {
			p.byIndex[r.index] = r
		}
	}
	pending := func() []srRef {
		out := make([]srRef, d.arr())
		for k := range out {
			if d.arr() != 4 {
				d.fail(fmt.Errorf("reservation not of 4"))
			}
			out[k] = srRef{d.u(), d.s(), d.u(), d.i()}
		}
		return out
	}
	p.far = pending()
	ng := d.arr()
	for range ng {
		if d.arr() != 4 {
			d.fail(fmt.Errorf("garbage not of 4"))
		}
		d.u()
		d.s()
		d.u()
		d.s()
	}
	p.garbage = ng
	p.orphans = pending()
	nt := d.arr()
	for range nt {
		t := p.task(d.s())
		t.indexed = d.bl()
		t.sel.fields = d.strs()
		if len(t.sel.fields) == 0 {
			t.sel.fields = nil
		}
		t.sel.gtag, t.sel.gsep, t.sel.gsize, t.sel.stag, t.sel.sdrop = d.s(), d.s(), d.i(), d.s(), d.bl()
		ne := d.arr()
		for range ne {
			n := d.arr()
			if n < 6 || n > 9 {
				d.fail(fmt.Errorf("entry not of 6 to 9 parts"))
			}
			i := d.u()
			t.entries[i] = &srEntry{state: int(d.u()), deliveries: d.i(), token: d.s(), until: d.i(), max: d.i()}
			if n >= 8 { // the row's last error and when: this reader keeps no reasons
				d.s()
				d.i()
			}
			if n == 7 || n == 9 { // a lease's grant time: this reader keeps none
				d.i()
			}
		}
		np := d.arr()
		for range np {
			i := d.u()
			t.parked[i] = d.f()
		}
		nb := d.arr()
		for range nb {
			ob := &srBatch{token: d.s()}
			nrow := d.arr()
			for range nrow {
				d.s()
				ob.rows = append(ob.rows, d.u())
				var r srRow
				view(&r)
			}
			ob.units = make([][]int64, d.arr())
			for k := range ob.units {
				ob.units[k] = make([]int64, d.arr())
				for j := range ob.units[k] {
					ob.units[k][j] = d.i()
				}
			}
			ob.taken = make([]bool, d.arr())
			for k := range ob.taken {
				ob.taken[k] = d.bl()
			}
			ob.takers = make([]string, len(ob.taken)) // unknown till section 8
			t.batches = append(t.batches, ob)
		}
		ns := d.arr()
		for range ns {
			rec := d.bin()
			if len(rec) == 0 || rec[0] != 'Q' {
				d.fail(fmt.Errorf("standing claim not a claim"))
				continue
			}
			cd := &sd{b: rec[1:]}
			a := readSRClaim(cd)
			d.fail(cd.err)
			t.standing = append(t.standing, &srStanding{a: *a, until: d.i()})
		}
		nsv := d.arr()
		for range nsv {
			tok := d.s()
			t.served[tok] = srServed{until: d.i(), rows: d.idx()}
		}
	}
	nv := d.arr()
	for range nv {
		id := d.u()
		p.voids[id] = d.i()
	}
	if d.err == nil && len(d.b) != 0 {
		p.capRows, p.capBytes, p.clearAfter = d.i(), d.i(), d.strs()
		nh := d.arr()
		for range nh / 2 {
			k := d.s()
			d.i() // since: when it was prepared (group deadlines and aborts, not applied here)
			if r := p.rows[k]; r != nil {
				r.held = true
			} else {
				d.fail(fmt.Errorf("held row %q unknown", k))
			}
		}
		if d.err == nil && len(d.b) != 0 {
			for range d.arr() { // group deadlines: not applied by this reader
				d.s()
				d.i()
				d.bl()
			}
			d.u() // inserted and consumed: not kept by this reader
			d.u()
			for range d.arr() { // each task's count
				name := d.s()
				n := d.u()
				if t := p.tasks[name]; t != nil {
					t.count = n
				} else if d.err == nil {
					d.fail(fmt.Errorf("count of task %q, not in the snapshot", name))
				}
			}
			if len(d.b) != 0 {
				for range d.arr() { // open batches' partial flags: not kept either
					d.s()
					for range d.arr() {
						for range d.arr() {
							d.bl()
						}
					}
				}
			}
			if d.err == nil && len(d.b) != 0 {
				for range d.arr() { // open batches' ends
					name := d.s()
					t := p.tasks[name]
					n := d.arr()
					if t == nil || n != len(t.batches) {
						d.fail(fmt.Errorf("ends of %d batches of task %q", n, name))
						break
					}
					for _, b := range t.batches {
						b.end = d.i()
					}
				}
			}
			if d.err == nil && len(d.b) != 0 {
				for range d.arr() { // open batches' takers
					name := d.s()
					t := p.tasks[name]
					n := d.arr()
					if t == nil || n != len(t.batches) {
						d.fail(fmt.Errorf("takers of %d batches of task %q", n, name))
						break
					}
					for _, b := range t.batches {
						nt := d.arr()
						if nt != 0 && nt != len(b.taken) {
							d.fail(fmt.Errorf("takers of %d ranks, batch of %d", nt, len(b.taken)))
							break
						}
						b.takers = make([]string, len(b.taken))
						for k := range nt {
							b.takers[k] = d.s()
						}
					}
				}
			}
			if d.err == nil && len(d.b) != 0 {
				n := d.arr() // undone tokens: 2 values each
				if n%2 != 0 {
					d.fail(fmt.Errorf("undone tokens of %d values", n))
				}
				for range n / 2 {
					tok := d.s()
					p.undone[tok] = d.i()
				}
			}
			if d.err == nil && len(d.b) != 0 {
				p.restoreBlocks(d)
			}
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail(fmt.Errorf("%d bytes after the snapshot", len(d.b)))
	}
	return p, d.err
}

// restoreBlocks reads the snapshot's live blocks (LOG.md section 6, part
// 10): by base, each [base, token, n, at, [field, ...], [word, ...]].
func (p *srState) restoreBlocks(d *sd) {
	nb := d.arr()
	for range nb {
		if d.arr() != 6 {
			d.fail(fmt.Errorf("a block not of 6 parts"))
		}
		b := &srBlock{base: d.u(), token: d.u(), n: d.u(), at: d.i(), fields: d.strs()}
		words := d.idx()
		if d.err != nil {
			return
		}
		if b.n < 1 || b.n > 4096 || !srIncreasing(b.fields) || uint64(len(words)) != (b.n+63)/64 || b.base+b.n < b.base {
			d.fail(fmt.Errorf("a block of %d indexes at %d, fields %q, %d words", b.n, b.base, b.fields, len(words)))
			return
		}
		b.taken = make([]bool, b.n)
		for off := range b.n {
			b.taken[off] = words[off/64]>>(off%64)&1 != 0
		}
		if b.n%64 != 0 && words[len(words)-1]>>(b.n%64) != 0 || b.left() == 0 {
			d.fail(fmt.Errorf("block at %d: bits past its indexes, or none left", b.base))
			return
		}
		if k := len(p.blocks); k > 0 && b.base < p.blocks[k-1].base+p.blocks[k-1].n {
			d.fail(fmt.Errorf("block at %d overlaps the one before, or is out of order", b.base))
			return
		}
		for _, r := range p.rows { // no row is given an index of a live block but by a U
			if r.index >= b.base && r.index < b.base+b.n && !b.taken[r.index-b.base] {
				d.fail(fmt.Errorf("block at %d: row %q has its index %d, not taken", b.base, r.key, r.index))
				return
			}
		}
		p.blocks = append(p.blocks, b)
		c := *b
		c.taken = slices.Clone(b.taken)
		p.snapBlocks = append(p.snapBlocks, &c)
	}
}

// ---- reading the server (LAYOUT.md sections 1 to 6) ----

// srBase is LAYOUT.md's base of partition part under prefix.
func srBase(prefix, part string) string {
	esc := strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D").Replace(part)
	return prefix + ":{" + prefix + ":" + esc + "}"
}

// srLog is what a partition's keys held, read atomically.
type srLog struct {
	entries []goredis.XMessage
	snap    map[string]string
}

func readSRLog(ctx context.Context, c *goredis.Client, prefix, part string) (*srLog, error) {
	base := srBase(prefix, part)
	var xr *goredis.XMessageSliceCmd
	var hg *goredis.MapStringStringCmd
	_, err := c.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		xr = p.XRange(ctx, base+":log", "-", "+")
		hg = p.HGetAll(ctx, base+":snap")
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &srLog{entries: xr.Val(), snap: hg.Val()}, nil
}

// replaySR replays a partition read from the start (LAYOUT.md section 6).
func replaySR(l *srLog) (*srState, error) {
	p := newSR()
	after := uint64(0)
	first := ""
	if len(l.entries) > 0 {
		first = l.entries[0].ID
	}
	if first != "1-0" && (len(l.entries) > 0 || len(l.snap) > 0) {
		n, ok := l.snap["n"]
		if !ok {
			return nil, fmt.Errorf("a log from %q without a snapshot", first)
		}
		var err error
		if after, err = strconv.ParseUint(n, 10, 64); err != nil {
			return nil, err
		}
		if _, emptied := l.snap["z"]; !emptied {
			if p, err = restoreSR([]byte(l.snap["d"])); err != nil {
				return nil, fmt.Errorf("snapshot: %w", err)
			}
		}
	}
	want := after + 1
	for _, e := range l.entries {
		num, ok := strings.CutSuffix(e.ID, "-0")
		n, err := strconv.ParseUint(num, 10, 64)
		if !ok || err != nil {
			return nil, fmt.Errorf("entry ID %q", e.ID)
		}
		if n <= after {
			continue
		}
		if n != want {
			return nil, fmt.Errorf("entry %d where %d follows", n, want)
		}
		want++
		id, err := strconv.ParseUint(e.Values["i"].(string), 10, 64)
		if err != nil {
			return nil, err
		}
		t, err := strconv.ParseInt(e.Values["t"].(string), 10, 64)
		if err != nil {
			return nil, err
		}
		var base uint64
		if b, ok := e.Values["b"]; ok {
			if base, err = strconv.ParseUint(b.(string), 10, 64); err != nil {
				return nil, err
			}
		}
		p.applyEntry(id, t, base, []byte(e.Values["d"].(string)))
	}
	return p, nil
}

// srStorageKey is LAYOUT.md section 3's.
func srStorageKey(index uint64, field string, gen uint64) string {
	if gen == 0 {
		return fmt.Sprintf("%d@%s", index, field)
	}
	return fmt.Sprintf("%d@%s#%d", index, field, gen)
}

// srCounts are a task's rows by state, as tq.Status counts them: every
// committed row with no state is ready.
type srCounts struct{ ready, leased, acked, dead, dropped int }

func (p *srState) counts(task string, at int64) (srCounts, bool) {
	t := p.tasks[task]
	if t == nil || len(t.entries) == 0 && t.count == 0 {
		return srCounts{}, false
	}
	var c srCounts
	for i := range p.byIndex {
		st := srReady
		if e := t.entries[i]; e != nil {
			st = srSeen(*e, at).state
		}
		switch st {
		case srReady:
			c.ready++
		case srLeased:
			c.leased++
		case srAcked:
			c.acked++
		case srDead:
			c.dead++
		case srDropped:
			c.dropped++
		}
	}
	return c, true
}
