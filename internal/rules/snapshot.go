package rules

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/tinylib/msgp/msgp"

	"github.com/tqgo/tqgo/backends/metadata"
)

// Snapshots: a partition's whole state as one byte string, which a
// shared engine keeps in place of the log entries before it
// (backends.Log.Compact). Restore of a snapshot gives a partition that
// applies every later record as the one snapshotted would. backends/LOG.md
// specifies the format.

const kindSnapshot = 'S'

// Snapshot encodes the partition's state.
func (p *Partition) Snapshot() ([]byte, error) { return p.Freeze().Encode() }

// Frozen is a partition's state as of a Freeze, for Encode to write out
// later. Taking it costs a pass over the rows and a copy of each task's
// entries map, far less than encoding them: a caller that serializes
// access to the partition holds its lock for the Freeze only, and encodes
// after (a snapshot of a large partition then stops no call for its
// encoding). It holds what the partition may change after by copy, and
// shares only what the partition never changes in place (committed
// views, entries).
type Frozen struct {
	now  int64
	seq  uint64
	rows []frozenRow
	wins []frozenGen // the gens of rows not sharing them (see frozenRow), each row's a run of them
	// head is far, garbage and orphans, encoded.
	head  []byte
	tasks []frozenTask
	// voids and the last section, encoded, but the held rows (which are
	// written in key order, from rows): last[0] runs up to them, last[1]
	// after; last is nil when the section is left out.
	voids []byte
	last  [][]byte
	held  int
}

type frozenRow struct {
	key   string
	index uint64
	view  *metadata.Row
	since int64
	held  bool
	// gens is a committed row's with none pending in a window: shared,
	// the row marked to copy them before a change (row.own); nil for any
	// other row, whose gens are copied, Frozen.wins[win:win+nwin].
	gens      []fieldGen
	win, nwin int
}

type frozenGen struct {
	field                string
	next, pend           uint64
	at, old, size, nsize int64
}

// append appends g as a snapshot's row lists it.
func (g frozenGen) append(b []byte) []byte {
	b = msgp.AppendArrayHeader(b, 7)
	b = msgp.AppendString(b, g.field)
	b = msgp.AppendUint64(b, g.next)
	b = msgp.AppendUint64(b, g.pend)
	b = msgp.AppendInt64(b, g.at)
	b = msgp.AppendInt64(b, g.old)
	b = msgp.AppendInt64(b, g.size)
	return msgp.AppendInt64(b, g.nsize)
}

type frozenTask struct {
	head    []byte            // name, indexed, the selection
	entries map[uint64]*entry // never changed in place: shared
	// tail is parked, encoded; batches are encoded at Encode (their rows
	// name field tables, numbered after the rows'); rest is the standing
	// and served claims, encoded.
	parked  []byte
	batches []frozenBatch
	rest    []byte
}

type frozenBatch struct {
	lease string
	rows  []*metadata.Row
	units [][]int
	taken []bool
}

// Freeze captures the partition's state for Encode. It changes nothing
// that a later call sees (it marks the rows' gens to be copied before
// their next change).
func (p *Partition) Freeze() *Frozen {
	f := &Frozen{now: p.now, seq: p.seq, rows: make([]frozenRow, 0, len(p.rows))}
	for k, r := range p.rows {
		fr := frozenRow{key: k, index: r.index, view: r.view, since: r.since, held: r.held}
		if r.view != nil && !slices.ContainsFunc(r.gens, func(g fieldGen) bool { return g.w != 0 }) {
			// Shareable as genSharer shares: committed, none pending.
			fr.gens, r.shared = r.gens, true
		} else {
			fr.win, fr.nwin = len(f.wins), len(r.gens)
			for _, g := range r.gens {
				var w pendWindow // a field with none pending: 0s, which read back as none
				if g.w != 0 {
					w = *p.win(&g)
				}
				f.wins = append(f.wins, frozenGen{field: g.field, next: g.next, pend: w.pend, at: w.at, old: w.old, size: g.size, nsize: w.nsize})
			}
		}
		f.rows = append(f.rows, fr)
	}
	var b []byte
	b = appendPending(b, p.far)
	b = appendRefs(b, p.garbage, true)
	f.head = appendPending(b, p.orphans)
	names := slices.Sorted(maps.Keys(p.tasks))
	for _, name := range names {
		t := p.tasks[name]
		var ft frozenTask
		b := msgp.AppendString(nil, name)
		b = msgp.AppendBool(b, t.indexed)
		b = appendStrings(b, t.sel.Fields)
		b = msgp.AppendString(b, t.sel.Group.Tag)
		b = msgp.AppendString(b, t.sel.Group.Sep)
		b = msgp.AppendInt64(b, int64(t.sel.Group.Size))
		b = msgp.AppendString(b, t.sel.Stale.Tag)
		ft.head = msgp.AppendBool(b, t.sel.Stale.Drop)
		ft.entries = maps.Clone(t.entries)
		b = msgp.AppendArrayHeader(nil, uint32(len(t.parked)))
		for _, i := range slices.Sorted(maps.Keys(t.parked)) {
			b = msgp.AppendUint64(b, i)
			b = msgp.AppendFloat64(b, t.parked[i])
		}
		ft.parked = b
		for _, ob := range t.batches {
			units := make([][]int, len(ob.units))
			for i, u := range ob.units {
				units[i] = slices.Clone(u)
			}
			ft.batches = append(ft.batches, frozenBatch{lease: ob.lease, rows: slices.Clone(ob.rows), units: units, taken: slices.Clone(ob.taken)})
		}
		b = msgp.AppendArrayHeader(nil, uint32(len(t.standing)))
		for _, st := range t.standing {
			b = msgp.AppendBytes(b, ClaimRecord(&st.a))
			b = msgp.AppendInt64(b, st.until)
		}
		b = msgp.AppendArrayHeader(b, uint32(len(t.served)))
		for _, tok := range slices.Sorted(maps.Keys(t.served)) {
			sv := t.served[tok]
			b = msgp.AppendString(b, tok)
			b = msgp.AppendInt64(b, sv.until)
			b = appendIndexes(b, sv.rows)
		}
		ft.rest = b
		f.tasks = append(f.tasks, ft)
	}
	b = msgp.AppendArrayHeader(nil, uint32(len(p.voids)))
	for _, id := range slices.Sorted(maps.Keys(p.voids)) {
		b = msgp.AppendUint64(b, id)
		b = msgp.AppendInt64(b, p.voids[id])
	}
	f.voids = b
	f.last = p.freezeLast(names)
	f.held = p.held
	return f
}

// freezeLast encodes the snapshot's last section, but for its held rows,
// which go between the two parts it returns; nil when the section is left
// out. names are the partition's tasks in name order.
func (p *Partition) freezeLast(names []string) [][]byte {
	// The capacity, the rows that hold room of it, and the group
	// deadlines of tasks (a section a snapshot without any may leave out).
	var dl []string      // tasks whose groups have a deadline
	var flagged []string // tasks with an open batch holding partial groups
	var open []string    // tasks with an open batch
	var counted []string // tasks with a count
	for _, name := range names {
		t := p.tasks[name]
		if t.indexed && t.sel.Group.Deadline > 0 {
			dl = append(dl, name)
		}
		if slices.ContainsFunc(t.batches, func(b *openBatch) bool { return b.partial != nil }) {
			flagged = append(flagged, name)
		}
		if len(t.batches) > 0 {
			open = append(open, name)
		}
		if t.consumed > 0 {
			counted = append(counted, name)
		}
	}
	if p.capacity.Zero() && p.held == 0 && len(dl) == 0 && p.inserted == 0 && p.consumed == 0 && len(flagged) == 0 && len(open) == 0 && len(p.undone) == 0 && len(p.blocks) == 0 {
		return nil
	}
	before := CapacityRecord(p.capacity)[1:]
	var b []byte
	b = msgp.AppendArrayHeader(b, uint32(len(dl)))
	for _, name := range dl {
		t := p.tasks[name]
		b = msgp.AppendString(b, name)
		b = msgp.AppendInt64(b, t.sel.Group.Deadline.Microseconds())
		b = msgp.AppendBool(b, t.sel.Group.Partial)
	}
	b = msgp.AppendUint64(b, p.inserted)
	b = msgp.AppendUint64(b, p.consumed)
	b = msgp.AppendArrayHeader(b, uint32(len(counted)))
	for _, name := range counted {
		b = msgp.AppendString(b, name)
		b = msgp.AppendUint64(b, p.tasks[name].consumed)
	}
	b = p.appendPerBatch(b, flagged, func(b []byte, ob *openBatch) []byte {
		b = msgp.AppendArrayHeader(b, uint32(len(ob.partial)))
		for _, x := range ob.partial {
			b = msgp.AppendBool(b, x)
		}
		return b
	})
	if len(open) > 0 || len(p.undone) > 0 || len(p.blocks) > 0 {
		b = p.appendPerBatch(b, open, func(b []byte, ob *openBatch) []byte { return msgp.AppendInt64(b, ob.until) })
		b = p.appendPerBatch(b, open, func(b []byte, ob *openBatch) []byte {
			b = msgp.AppendArrayHeader(b, uint32(len(ob.takers)))
			for _, tok := range ob.takers {
				b = msgp.AppendString(b, tok)
			}
			return b
		})
	}
	if len(p.undone) > 0 || len(p.blocks) > 0 {
		b = msgp.AppendArrayHeader(b, uint32(2*len(p.undone)))
		for _, tok := range slices.Sorted(maps.Keys(p.undone)) {
			b = msgp.AppendString(b, tok)
			b = msgp.AppendInt64(b, p.undone[tok])
		}
	}
	if len(p.blocks) > 0 {
		b = msgp.AppendArrayHeader(b, uint32(len(p.blocks)))
		for _, bl := range p.blocks {
			b = msgp.AppendArrayHeader(b, 6)
			b = msgp.AppendUint64(b, bl.base)
			b = msgp.AppendUint64(b, bl.token)
			b = msgp.AppendUint64(b, uint64(bl.n))
			b = msgp.AppendInt64(b, bl.at)
			b = appendStrings(b, bl.fields)
			b = appendIndexes(b, bl.taken)
		}
	}
	return [][]byte{before, b}
}

// Encode writes the state Freeze captured as a snapshot (backends/LOG.md,
// Snapshots): the bytes Snapshot gave at the Freeze. It may run while the
// partition changes, and more than once.
func (f *Frozen) Encode() ([]byte, error) {
	var tw tableWriter
	rows := f.rows
	slices.SortFunc(rows, func(a, b frozenRow) int { return strings.Compare(a.key, b.key) })
	b := make([]byte, 0, 64+48*len(rows))
	b = msgp.AppendInt64(b, f.now)
	b = msgp.AppendUint64(b, f.seq)
	b = msgp.AppendArrayHeader(b, uint32(len(rows)))
	for _, r := range rows {
		b = msgp.AppendString(b, r.key)
		b = msgp.AppendUint64(b, r.index)
		var err error
		if b, err = appendView(b, &tw, r.view, r.since); err != nil {
			return nil, err
		}
		if r.gens != nil {
			b = msgp.AppendArrayHeader(b, uint32(len(r.gens)))
			for _, g := range r.gens {
				b = frozenGen{field: g.field, next: g.next, size: g.size}.append(b) // none pending: 0s
			}
		} else {
			b = msgp.AppendArrayHeader(b, uint32(r.nwin))
			for _, g := range f.wins[r.win : r.win+r.nwin] {
				b = g.append(b)
			}
		}
	}
	b = append(b, f.head...)
	b = msgp.AppendArrayHeader(b, uint32(len(f.tasks)))
	for _, t := range f.tasks {
		b = append(b, t.head...)
		b = msgp.AppendArrayHeader(b, uint32(len(t.entries)))
		for _, i := range slices.Sorted(maps.Keys(t.entries)) {
			e := t.entries[i]
			parts := uint32(6)
			if e.reason != "" {
				parts += 2 // its reason and when
			}
			if e.granted > 0 {
				parts++ // when its lease was granted
			}
			b = msgp.AppendArrayHeader(b, parts)
			b = msgp.AppendUint64(b, i)
			b = msgp.AppendUint8(b, uint8(e.state))
			b = msgp.AppendInt64(b, int64(e.deliveries))
			b = msgp.AppendString(b, e.lease)
			b = msgp.AppendInt64(b, e.until)
			b = msgp.AppendInt64(b, int64(e.max))
			if e.reason != "" {
				b = msgp.AppendString(b, e.reason)
				b = msgp.AppendInt64(b, e.at)
			}
			if e.granted > 0 {
				b = msgp.AppendInt64(b, e.granted)
			}
		}
		b = append(b, t.parked...)
		b = msgp.AppendArrayHeader(b, uint32(len(t.batches)))
		for _, ob := range t.batches {
			b = msgp.AppendString(b, ob.lease)
			b = msgp.AppendArrayHeader(b, uint32(len(ob.rows)))
			for _, r := range ob.rows {
				b = msgp.AppendString(b, r.Key)
				b = msgp.AppendUint64(b, r.Index)
				var err error
				if b, err = appendView(b, &tw, r, -1); err != nil {
					return nil, err
				}
			}
			b = msgp.AppendArrayHeader(b, uint32(len(ob.units)))
			for _, u := range ob.units {
				b = msgp.AppendArrayHeader(b, uint32(len(u)))
				for _, i := range u {
					b = msgp.AppendInt64(b, int64(i))
				}
			}
			b = msgp.AppendArrayHeader(b, uint32(len(ob.taken)))
			for _, x := range ob.taken {
				b = msgp.AppendBool(b, x)
			}
		}
		b = append(b, t.rest...)
	}
	b = append(b, f.voids...)
	if f.last != nil {
		b = append(b, f.last[0]...)
		b = msgp.AppendArrayHeader(b, uint32(2*f.held))
		for _, r := range rows {
			if r.held {
				b = msgp.AppendString(b, r.key)
				b = msgp.AppendInt64(b, r.since)
			}
		}
		b = append(b, f.last[1]...)
	}
	return tw.record(kindSnapshot, b), nil
}

// appendView appends a row's committed state: nil (not committed), or
// its field table's number and its tag.
func appendView(b []byte, tw *tableWriter, r *metadata.Row, since int64) ([]byte, error) {
	if r == nil {
		return msgp.AppendNil(b), nil
	}
	if since < 0 {
		b = msgp.AppendArrayHeader(b, 2)
	} else {
		b = msgp.AppendArrayHeader(b, 3)
	}
	b = msgp.AppendUint64(b, tw.ref(nonNil(r.Fields)))
	b, err := AppendTag(b, r.Tag)
	if err == nil && since >= 0 {
		b = msgp.AppendInt64(b, since)
	}
	return b, err
}

var emptyFields = map[string]metadata.FieldInfo{}

// nonNil is fields, or an empty table for none: a committed row's table
// is never "no table".
func nonNil(f map[string]metadata.FieldInfo) map[string]metadata.FieldInfo {
	if f == nil {
		return emptyFields
	}
	return f
}

func readView(b []byte, tables []map[string]metadata.FieldInfo, tags *tagSharer, key string, index uint64, since *int64) (*metadata.Row, []byte, error) {
	if msgp.IsNil(b) {
		return nil, b[1:], nil
	}
	n, b, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil {
		return nil, nil, err
	}
	if n != 2 && n != 3 {
		return nil, nil, fmt.Errorf("row view of %d values", n)
	}
	r := &metadata.Row{Key: key, Index: index}
	if r.Fields, b, err = readTableRef(b, tables); err != nil {
		return nil, nil, err
	}
	if r.Fields == nil {
		return nil, nil, fmt.Errorf("committed row %q without a field table", key)
	}
	if r.Tag, b, err = tags.decode(b); err != nil {
		return nil, nil, err
	}
	if n == 3 {
		var at int64
		if at, b, err = msgp.ReadInt64Bytes(b); err != nil {
			return nil, nil, err
		}
		if since != nil {
			*since = at
		}
	}
	return r, b, nil
}

func appendPending(b []byte, refs []pendingRef) []byte {
	b = msgp.AppendArrayHeader(b, uint32(len(refs)))
	for _, o := range refs {
		b = msgp.AppendArrayHeader(b, 4)
		b = msgp.AppendUint64(b, o.ref.Index)
		b = msgp.AppendString(b, o.ref.Field)
		b = msgp.AppendUint64(b, o.ref.Gen)
		b = msgp.AppendInt64(b, o.at)
	}
	return b
}

func readPending(b []byte) ([]pendingRef, []byte, error) {
	n, b, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil {
		return nil, nil, err
	}
	if uint32(len(b)) < n {
		return nil, nil, msgp.ErrShortBytes
	}
	out := make([]pendingRef, n)
	for i := range out {
		var parts uint32
		if parts, b, err = msgp.ReadArrayHeaderBytes(b); err != nil {
			return nil, nil, err
		}
		if parts != 4 {
			return nil, nil, fmt.Errorf("reservation of %d parts", parts)
		}
		o := &out[i]
		if o.ref.Index, b, err = msgp.ReadUint64Bytes(b); err != nil {
			return nil, nil, err
		}
		if o.ref.Field, b, err = msgp.ReadStringBytes(b); err != nil {
			return nil, nil, err
		}
		if o.ref.Gen, b, err = msgp.ReadUint64Bytes(b); err != nil {
			return nil, nil, err
		}
		if o.at, b, err = msgp.ReadInt64Bytes(b); err != nil {
			return nil, nil, err
		}
	}
	return out, b, nil
}

// Restore returns the partition a snapshot encodes. An error matches
// ErrCorrupt.
func Restore(snap []byte) (*Partition, error) {
	p, err := restore(snap)
	if err != nil {
		return nil, fmt.Errorf("%w: snapshot: %w", ErrCorrupt, err)
	}
	return p, nil
}

func restore(b []byte) (*Partition, error) {
	if len(b) == 0 || b[0] != kindSnapshot {
		return nil, fmt.Errorf("not a snapshot")
	}
	tables, b, err := readTables(b[1:])
	if err != nil {
		return nil, err
	}
	p := New()
	if p.now, b, err = msgp.ReadInt64Bytes(b); err != nil {
		return nil, err
	}
	if p.seq, b, err = msgp.ReadUint64Bytes(b); err != nil {
		return nil, err
	}
	var n uint32
	if n, b, err = msgp.ReadArrayHeaderBytes(b); err != nil {
		return nil, err
	}
	if uint32(len(b)) < n {
		return nil, msgp.ErrShortBytes
	}
	rows := make([]row, n)
	var (
		tags tagSharer
		gens genSharer
	)
	for i := range rows {
		r := &rows[i]
		var key string
		if key, b, err = msgp.ReadStringBytes(b); err != nil {
			return nil, err
		}
		if r.index, b, err = msgp.ReadUint64Bytes(b); err != nil {
			return nil, err
		}
		r.since = p.now // a snapshot's row without its time: as of the snapshot
		if r.view, b, err = readView(b, tables, &tags, key, r.index, &r.since); err != nil {
			return nil, err
		}
		var ng uint32
		if ng, b, err = msgp.ReadArrayHeaderBytes(b); err != nil {
			return nil, err
		}
		if uint32(len(b)) < ng {
			return nil, msgp.ErrShortBytes
		}
		r.gens = make([]fieldGen, ng)
		for j := range r.gens {
			g := &r.gens[j]
			var parts uint32
			if parts, b, err = msgp.ReadArrayHeaderBytes(b); err != nil {
				return nil, err
			}
			if parts != 5 && parts != 7 {
				return nil, fmt.Errorf("field generations of %d parts", parts)
			}
			if g.field, b, err = msgp.ReadStringBytes(b); err != nil {
				return nil, err
			}
			if g.next, b, err = msgp.ReadUint64Bytes(b); err != nil {
				return nil, err
			}
			var w pendWindow
			if w.pend, b, err = msgp.ReadUint64Bytes(b); err != nil {
				return nil, err
			}
			if w.at, b, err = msgp.ReadInt64Bytes(b); err != nil {
				return nil, err
			}
			if w.old, b, err = msgp.ReadInt64Bytes(b); err != nil {
				return nil, err
			}
			if parts == 7 {
				if g.size, b, err = msgp.ReadInt64Bytes(b); err != nil {
					return nil, err
				}
				if w.nsize, b, err = msgp.ReadInt64Bytes(b); err != nil {
					return nil, err
				}
				if g.size < 0 || w.nsize < 0 {
					return nil, fmt.Errorf("row %q field %q: negative size", key, g.field)
				}
				p.bytes += g.size
			}
			if w.pend != 0 && g.next < uint64(64-bitsLeading(w.pend)) {
				return nil, fmt.Errorf("row %q field %q: pending generations below 0", key, g.field)
			}
			if w.pend != 0 {
				// at, old and nsize matter only while a generation is
				// pending: a field with none keeps no window (a writer
				// before windows wrote what it last had).
				w.row = r.index
				p.newWindow(g, w)
			}
			p.pending += popcount(w.pend)
		}
		if r.view != nil {
			gens.share(r)
		}
		if _, dup := p.rows[key]; dup {
			return nil, fmt.Errorf("row %q twice", key)
		}
		p.rows[key] = r
		if _, dup := p.byIndex[r.index]; dup {
			return nil, fmt.Errorf("index %d twice", r.index)
		}
		if _, dup := p.uncommitted[r.index]; dup {
			return nil, fmt.Errorf("index %d twice", r.index)
		}
		if r.view != nil {
			p.byIndex[r.index] = r
			p.committed++
		} else {
			p.prepared(r)
		}
	}
	if p.far, b, err = readPending(b); err != nil {
		return nil, err
	}
	p.pending += len(p.far)
	if p.garbage, b, err = readRefs(b, true); err != nil {
		return nil, err
	}
	if p.orphans, b, err = readPending(b); err != nil {
		return nil, err
	}
	var nt uint32
	if nt, b, err = msgp.ReadArrayHeaderBytes(b); err != nil {
		return nil, err
	}
	if uint32(len(b)) < nt {
		return nil, msgp.ErrShortBytes
	}
	for range nt {
		var name string
		if name, b, err = msgp.ReadStringBytes(b); err != nil {
			return nil, err
		}
		t := p.task(name)
		var indexed bool
		if indexed, b, err = msgp.ReadBoolBytes(b); err != nil {
			return nil, err
		}
		var sel Select
		var size int64
		if sel.Fields, b, err = readStrings(b); err != nil {
			return nil, err
		}
		if sel.Group.Tag, b, err = msgp.ReadStringBytes(b); err != nil {
			return nil, err
		}
		if sel.Group.Sep, b, err = msgp.ReadStringBytes(b); err != nil {
			return nil, err
		}
		if size, b, err = msgp.ReadInt64Bytes(b); err != nil {
			return nil, err
		}
		if size < 0 || size > math.MaxInt32 {
			return nil, fmt.Errorf("group size %d", size)
		}
		sel.Group.Size = int(size)
		if sel.Stale.Tag, b, err = msgp.ReadStringBytes(b); err != nil {
			return nil, err
		}
		if sel.Stale.Drop, b, err = msgp.ReadBoolBytes(b); err != nil {
			return nil, err
		}
		var ne uint32
		if ne, b, err = msgp.ReadArrayHeaderBytes(b); err != nil {
			return nil, err
		}
		if uint32(len(b)) < ne {
			return nil, msgp.ErrShortBytes
		}
		var last *entry
		for range ne {
			var parts uint32
			if parts, b, err = msgp.ReadArrayHeaderBytes(b); err != nil {
				return nil, err
			}
			if parts < 6 || parts > 9 {
				return nil, fmt.Errorf("entry of %d parts", parts)
			}
			var i uint64
			var st uint8
			var dl, mx int64
			e := &entry{}
			if i, b, err = msgp.ReadUint64Bytes(b); err != nil {
				return nil, err
			}
			if st, b, err = msgp.ReadUint8Bytes(b); err != nil {
				return nil, err
			}
			if dl, b, err = msgp.ReadInt64Bytes(b); err != nil {
				return nil, err
			}
			if e.lease, b, err = msgp.ReadStringBytes(b); err != nil {
				return nil, err
			}
			if e.until, b, err = msgp.ReadInt64Bytes(b); err != nil {
				return nil, err
			}
			if mx, b, err = msgp.ReadInt64Bytes(b); err != nil {
				return nil, err
			}
			if parts >= 8 {
				if e.reason, b, err = msgp.ReadStringBytes(b); err != nil {
					return nil, err
				}
				if e.at, b, err = msgp.ReadInt64Bytes(b); err != nil {
					return nil, err
				}
				if e.reason == "" || len(e.reason) > metadata.MaxReason {
					return nil, fmt.Errorf("entry of row %d: reason of %d bytes", i, len(e.reason))
				}
			}
			if parts == 7 || parts == 9 {
				if e.granted, b, err = msgp.ReadInt64Bytes(b); err != nil {
					return nil, err
				}
				if e.granted <= 0 || metadata.State(st) != metadata.Leased {
					return nil, fmt.Errorf("entry of row %d: a grant time on a row not leased", i)
				}
			}
			if st < uint8(metadata.Ready) || st > uint8(metadata.Dropped) || dl < 0 || dl > math.MaxInt32 || mx < 0 || mx > math.MaxInt32 {
				return nil, fmt.Errorf("entry of row %d out of range", i)
			}
			e.state, e.deliveries, e.max = metadata.State(st), int(dl), int(mx)
			if last != nil && *last == *e {
				e = last // rows alike share an entry
			}
			last = e
			t.entries[i] = e
		}
		var np uint32
		if np, b, err = msgp.ReadArrayHeaderBytes(b); err != nil {
			return nil, err
		}
		if uint32(len(b)) < np {
			return nil, msgp.ErrShortBytes
		}
		parked := make([]parkedRow, np)
		for k := range parked {
			if parked[k].index, b, err = msgp.ReadUint64Bytes(b); err != nil {
				return nil, err
			}
			if parked[k].version, b, err = msgp.ReadFloat64Bytes(b); err != nil {
				return nil, err
			}
		}
		var nb uint32
		if nb, b, err = msgp.ReadArrayHeaderBytes(b); err != nil {
			return nil, err
		}
		if uint32(len(b)) < nb {
			return nil, msgp.ErrShortBytes
		}
		for range nb {
			ob := &openBatch{}
			if ob.lease, b, err = msgp.ReadStringBytes(b); err != nil {
				return nil, err
			}
			var nr uint32
			if nr, b, err = msgp.ReadArrayHeaderBytes(b); err != nil {
				return nil, err
			}
			if uint32(len(b)) < nr {
				return nil, msgp.ErrShortBytes
			}
			ob.rows = make([]*metadata.Row, nr)
			for k := range ob.rows {
				var key string
				var index uint64
				if key, b, err = msgp.ReadStringBytes(b); err != nil {
					return nil, err
				}
				if index, b, err = msgp.ReadUint64Bytes(b); err != nil {
					return nil, err
				}
				if ob.rows[k], b, err = readView(b, tables, &tags, key, index, nil); err != nil {
					return nil, err
				}
				if ob.rows[k] == nil {
					return nil, fmt.Errorf("batch row %q not committed", key)
				}
			}
			var nu uint32
			if nu, b, err = msgp.ReadArrayHeaderBytes(b); err != nil {
				return nil, err
			}
			if uint32(len(b)) < nu {
				return nil, msgp.ErrShortBytes
			}
			ob.units = make([][]int, nu)
			for k := range ob.units {
				var m uint32
				if m, b, err = msgp.ReadArrayHeaderBytes(b); err != nil {
					return nil, err
				}
				if uint32(len(b)) < m {
					return nil, msgp.ErrShortBytes
				}
				ob.units[k] = make([]int, m)
				for j := range ob.units[k] {
					var pos int64
					if pos, b, err = msgp.ReadInt64Bytes(b); err != nil {
						return nil, err
					}
					if pos < 0 || pos >= int64(nr) {
						return nil, fmt.Errorf("batch position %d of %d rows", pos, nr)
					}
					ob.units[k][j] = int(pos)
				}
			}
			var ntk uint32
			if ntk, b, err = msgp.ReadArrayHeaderBytes(b); err != nil {
				return nil, err
			}
			if uint32(len(b)) < ntk {
				return nil, msgp.ErrShortBytes
			}
			ob.taken = make([]bool, ntk)
			for k := range ob.taken {
				if ob.taken[k], b, err = msgp.ReadBoolBytes(b); err != nil {
					return nil, err
				}
			}
			t.batches = append(t.batches, ob)
		}
		var ns uint32
		if ns, b, err = msgp.ReadArrayHeaderBytes(b); err != nil {
			return nil, err
		}
		if uint32(len(b)) < ns {
			return nil, msgp.ErrShortBytes
		}
		for range ns {
			var rec []byte
			st := &standing{}
			if rec, b, err = msgp.ReadBytesZC(b); err != nil {
				return nil, err
			}
			if len(rec) == 0 || rec[0] != KindClaim {
				return nil, fmt.Errorf("task %q: a standing claim that is not a claim", name)
			}
			a, err := p.readClaim(rec[1:])
			if err != nil {
				return nil, err
			}
			st.a = *a
			if st.until, b, err = msgp.ReadInt64Bytes(b); err != nil {
				return nil, err
			}
			t.standing = append(t.standing, st)
		}
		var nsv uint32
		if nsv, b, err = msgp.ReadArrayHeaderBytes(b); err != nil {
			return nil, err
		}
		if uint32(len(b)) < nsv {
			return nil, msgp.ErrShortBytes
		}
		for range nsv {
			var tok string
			var sv served
			if tok, b, err = msgp.ReadStringBytes(b); err != nil {
				return nil, err
			}
			if sv.until, b, err = msgp.ReadInt64Bytes(b); err != nil {
				return nil, err
			}
			if sv.rows, b, err = readIndexes(b); err != nil {
				return nil, err
			}
			if t.served == nil {
				t.served = map[string]served{}
			}
			t.served[tok] = sv
		}
		if indexed {
			p.configure(t, sel)
			for _, pr := range parked {
				if p.byIndex[pr.index] == nil {
					return nil, fmt.Errorf("parked row %d not committed", pr.index)
				}
				t.park(pr.index, pr.version)
			}
		} else if len(parked) > 0 {
			return nil, fmt.Errorf("task %q parks rows without an index", name)
		}
	}
	var nv uint32
	if nv, b, err = msgp.ReadArrayHeaderBytes(b); err != nil {
		return nil, err
	}
	if uint32(len(b)) < nv {
		return nil, msgp.ErrShortBytes
	}
	for range nv {
		var id uint64
		var at int64
		if id, b, err = msgp.ReadUint64Bytes(b); err != nil {
			return nil, err
		}
		if at, b, err = msgp.ReadInt64Bytes(b); err != nil {
			return nil, err
		}
		if p.voids == nil {
			p.voids = map[uint64]int64{}
		}
		p.voids[id] = at
	}
	if len(b) != 0 {
		if p.capacity, b, err = readCapacity(b); err != nil {
			return nil, err
		}
		var nh uint32
		if nh, b, err = msgp.ReadArrayHeaderBytes(b); err != nil {
			return nil, err
		}
		if nh%2 != 0 {
			return nil, fmt.Errorf("held rows of %d values", nh)
		}
		for range nh / 2 {
			var k string
			if k, b, err = msgp.ReadStringBytes(b); err != nil {
				return nil, err
			}
			r := p.rows[k]
			if r == nil || r.held {
				return nil, fmt.Errorf("held row %q unknown or twice", k)
			}
			if r.since, b, err = msgp.ReadInt64Bytes(b); err != nil {
				return nil, err
			}
			r.held = true
			p.held++
		}
		if len(b) != 0 {
			if b, err = p.readDeadlines(b); err != nil {
				return nil, err
			}
		}
		if len(b) != 0 {
			if b, err = p.readCounts(b); err != nil {
				return nil, err
			}
		}
		if len(b) != 0 {
			if b, err = p.readBatchPartials(b); err != nil {
				return nil, err
			}
		}
		if len(b) != 0 {
			if b, err = p.readBatchEnds(b); err != nil {
				return nil, err
			}
		}
		if len(b) != 0 {
			if b, err = p.readBatchTakers(b); err != nil {
				return nil, err
			}
		}
		if len(b) != 0 {
			if b, err = p.readUndone(b); err != nil {
				return nil, err
			}
		}
		if len(b) != 0 {
			if b, err = p.readBlocks(b); err != nil {
				return nil, err
			}
		}
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%d bytes after the snapshot", len(b))
	}
	return p, nil
}

// readDeadlines reads a snapshot's group deadlines: per task, its
// Group.Deadline and Partial.
func (p *Partition) readDeadlines(b []byte) ([]byte, error) {
	n, b, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil {
		return b, err
	}
	for range n {
		var name string
		var dl int64
		var partial bool
		if name, b, err = msgp.ReadStringBytes(b); err != nil {
			return b, err
		}
		if dl, b, err = msgp.ReadInt64Bytes(b); err != nil {
			return b, err
		}
		if partial, b, err = msgp.ReadBoolBytes(b); err != nil {
			return b, err
		}
		t := p.tasks[name]
		if t == nil || !t.indexed || t.groups == nil || dl <= 0 || dl > math.MaxInt64/1000 {
			return b, fmt.Errorf("group deadline of task %q", name)
		}
		t.sel.Group.Deadline, t.sel.Group.Partial = time.Duration(dl)*time.Microsecond, partial
		t.groups.g = t.sel.Group
	}
	return b, nil
}

// readCounts reads a snapshot's counts: rows inserted, consumptions, and
// each task's consumptions.
func (p *Partition) readCounts(b []byte) ([]byte, error) {
	var err error
	if p.inserted, b, err = msgp.ReadUint64Bytes(b); err != nil {
		return b, err
	}
	if p.consumed, b, err = msgp.ReadUint64Bytes(b); err != nil {
		return b, err
	}
	n, b, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil {
		return b, err
	}
	for range n {
		var name string
		var c uint64
		if name, b, err = msgp.ReadStringBytes(b); err != nil {
			return b, err
		}
		if c, b, err = msgp.ReadUint64Bytes(b); err != nil {
			return b, err
		}
		t := p.tasks[name]
		if t == nil {
			return b, fmt.Errorf("counts of unknown task %q", name)
		}
		t.consumed = c
	}
	return b, nil
}

// appendPerBatch appends a snapshot part of the open batches of the tasks
// names: flat, per task, its name and an array of one value per open
// batch, in the order of the batches, each appended by one (readPerBatch
// reads it).
func (p *Partition) appendPerBatch(b []byte, names []string, one func(b []byte, ob *openBatch) []byte) []byte {
	b = msgp.AppendArrayHeader(b, uint32(len(names)))
	for _, name := range names {
		b = msgp.AppendString(b, name)
		bs := p.tasks[name].batches
		b = msgp.AppendArrayHeader(b, uint32(len(bs)))
		for _, ob := range bs {
			b = one(b, ob)
		}
	}
	return b
}

// readPerBatch reads a snapshot part of tasks' open batches: flat, per
// task, its name and an array of one value per open batch, in the order
// of the batches, each read by read; what names the part in errors.
func (p *Partition) readPerBatch(b []byte, what string, read func(ob *openBatch, b []byte) ([]byte, error)) ([]byte, error) {
	n, b, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil {
		return b, err
	}
	for range n {
		var name string
		if name, b, err = msgp.ReadStringBytes(b); err != nil {
			return b, err
		}
		t := p.tasks[name]
		var nb uint32
		if nb, b, err = msgp.ReadArrayHeaderBytes(b); err != nil {
			return b, err
		}
		if t == nil || int(nb) != len(t.batches) {
			return b, fmt.Errorf("%s of %d batches of task %q", what, nb, name)
		}
		for _, ob := range t.batches {
			if b, err = read(ob, b); err != nil {
				return b, err
			}
		}
	}
	return b, nil
}

// readBatchEnds reads the ends of tasks' open batches' leases (see
// openBatch.until); a snapshot without them leaves them 0 (a batch
// closes once none of its rows is leased).
func (p *Partition) readBatchEnds(b []byte) ([]byte, error) {
	return p.readPerBatch(b, "ends", func(ob *openBatch, b []byte) (_ []byte, err error) {
		ob.until, b, err = msgp.ReadInt64Bytes(b)
		return b, err
	})
}

// readBatchPartials reads the partial flags of tasks' open batches (an
// empty array for a batch without flags).
func (p *Partition) readBatchPartials(b []byte) ([]byte, error) {
	return readBatchArrays(p, b, "partial flags", func(ob *openBatch) int { return len(ob.units) }, msgp.ReadBoolBytes,
		func(ob *openBatch, flags []bool) error { ob.partial = flags; return nil })
}

// readBatchTakers reads the tokens of the claims that took tasks' open
// batches' shares (see openBatch.takers; an empty array for a batch
// without them).
func (p *Partition) readBatchTakers(b []byte) ([]byte, error) {
	return readBatchArrays(p, b, "takers", func(ob *openBatch) int { return len(ob.taken) }, msgp.ReadStringBytes,
		func(ob *openBatch, takers []string) error {
			for k, tok := range takers {
				if tok != "" && !ob.taken[k] {
					return fmt.Errorf("a taker of rank %d, whose share is not taken", k)
				}
			}
			ob.takers = takers
			return nil
		})
}

// readBatchArrays reads a snapshot part of one array per open batch (see
// readPerBatch): empty, or of want(ob) values, each read by read, which
// set checks and keeps.
func readBatchArrays[T any](p *Partition, b []byte, what string, want func(*openBatch) int,
	read func([]byte) (T, []byte, error), set func(*openBatch, []T) error) ([]byte, error) {
	return p.readPerBatch(b, what, func(ob *openBatch, b []byte) ([]byte, error) {
		n, b, err := msgp.ReadArrayHeaderBytes(b)
		if err != nil || n == 0 {
			return b, err
		}
		if int(n) != want(ob) {
			return b, fmt.Errorf("%s: %d values, want %d", what, n, want(ob))
		}
		vals := make([]T, n)
		for k := range vals {
			if vals[k], b, err = read(b); err != nil {
				return b, err
			}
		}
		return b, set(ob, vals)
	})
}

// readBlocks reads the live blocks, by base: per block an array of 6,
// base unsigned, token unsigned (its record's ID), n unsigned, at
// signed, [field, ...], and the taken
// offsets as [word, ...] (a bit per offset, offset i bit i%64 of word
// i/64, (n+63)/64 words).
func (p *Partition) readBlocks(b []byte) ([]byte, error) {
	n, b, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil {
		return b, err
	}
	if uint32(len(b)) < n {
		return b, msgp.ErrShortBytes
	}
	for range n {
		var parts uint32
		if parts, b, err = msgp.ReadArrayHeaderBytes(b); err != nil {
			return b, err
		}
		if parts != 6 {
			return b, fmt.Errorf("a block of %d parts", parts)
		}
		bl := &block{}
		var size uint64
		if bl.base, b, err = msgp.ReadUint64Bytes(b); err != nil {
			return b, err
		}
		if bl.token, b, err = msgp.ReadUint64Bytes(b); err != nil {
			return b, err
		}
		if size, b, err = msgp.ReadUint64Bytes(b); err != nil {
			return b, err
		}
		if bl.at, b, err = msgp.ReadInt64Bytes(b); err != nil {
			return b, err
		}
		if bl.fields, b, err = readStrings(b); err != nil {
			return b, err
		}
		if bl.taken, b, err = readIndexes(b); err != nil {
			return b, err
		}
		if size > MaxBlock || metadata.CheckBlock(bl.fields, int(size)) != nil || len(bl.taken) != (int(size)+63)/64 {
			return b, fmt.Errorf("a block of %d indexes, fields %q, %d words", size, bl.fields, len(bl.taken))
		}
		bl.n = uint32(size)
		if last := len(p.blocks) - 1; last >= 0 && p.blocks[last].base+uint64(p.blocks[last].n) > bl.base || bl.base+size < bl.base {
			return b, fmt.Errorf("block at %d overlaps or is out of order", bl.base)
		}
		if bl.left() <= 0 || size%64 != 0 && bl.taken[len(bl.taken)-1]>>(size%64) != 0 {
			return b, fmt.Errorf("block at %d: taken bits out of range or none left", bl.base)
		}
		p.blocks = append(p.blocks, bl)
	}
	return b, nil
}

// readUndone reads the undone claim tokens (see Partition.undone), in
// one array of 2·n values: per token, token str and time signed.
func (p *Partition) readUndone(b []byte) ([]byte, error) {
	n, b, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil {
		return b, err
	}
	if n%2 != 0 {
		return b, fmt.Errorf("undone tokens of %d values", n)
	}
	for range n / 2 {
		var tok string
		var at int64
		if tok, b, err = msgp.ReadStringBytes(b); err != nil {
			return b, err
		}
		if at, b, err = msgp.ReadInt64Bytes(b); err != nil {
			return b, err
		}
		if p.undone == nil {
			p.undone = map[string]int64{}
		}
		if _, twice := p.undone[tok]; twice || tok == "" {
			return b, fmt.Errorf("undone token %q empty or twice", tok)
		}
		p.undone[tok] = at
	}
	return b, nil
}
