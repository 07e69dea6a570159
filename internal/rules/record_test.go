package rules

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
)

// A log of random records applied to a partition, and to partitions
// restored from its snapshots at random points, gives the same results
// and the same state: records and snapshots carry everything the rules
// decide by.
func TestRecordsAndSnapshots(t *testing.T) {
	for seed := range uint64(30) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { recordHistory(t, seed) })
	}
}

type logger struct {
	t     *testing.T
	rng   *rand.Rand
	n     uint64
	now   int64
	next  uint64
	ps    []*Partition // the original and its restored copies
	quiet *Partition   // a copy that replays every record (no results)
	over  *Partition   // a copy whose rows share all they may (overshare)
	under *Partition   // a copy whose rows share nothing (undershare)
	// wide has every copy summarized after each record, alike, and has
	// the history use every settle op, hand some leased rows back and
	// drop stale rows.
	wide bool
	// frozen is the original frozen a few records back, and snap its
	// snapshot then: encoded now, it must give the same bytes.
	frozen *Frozen
	snap   []byte
}

func (l *logger) apply(data []byte, indexes int) []Result {
	l.t.Helper()
	l.n++
	e := &backends.Entry{N: l.n, ID: l.rng.Uint64() | 1, Time: l.now, Base: l.next, Data: data}
	l.next += uint64(indexes)
	var out []Result
	var served [][]Claimed
	for _, p := range l.ps {
		out = append(out, p.Apply(e))
		served = append(served, p.TakeFulfilled())
	}
	for i := 1; i < len(served); i++ {
		if !reflect.DeepEqual(served[0], served[i]) {
			l.t.Fatalf("record %d (%q): the original fulfilled %+v, restored copy %d %+v", l.n, data[0], served[0], i, served[i])
		}
	}
	l.reshareApply(e, out[0], served[0], fmt.Sprintf("record %d (%q)", l.n, data[0]))
	l.quiet.Replay(e)
	if q := l.quiet.TakeFulfilled(); !reflect.DeepEqual(q, served[0]) {
		l.t.Fatalf("record %d (%q): replayed, it fulfilled %+v; applied %+v", l.n, data[0], q, served[0])
	}
	if a, b := snapOf(l.ps[0]), snapOf(l.quiet); !slices.Equal(a, b) {
		l.t.Fatalf("record %d (%q): the quiet copy differs after it", l.n, data[0])
	}
	if l.frozen != nil && l.rng.IntN(4) == 0 {
		// The state frozen records ago encodes as it was, whatever the
		// records since changed.
		got, err := l.frozen.Encode()
		if err != nil || !slices.Equal(got, l.snap) {
			l.t.Fatalf("record %d (%q): a state frozen before it encodes otherwise after it (%v)", l.n, data[0], err)
		}
		l.frozen = nil
	}
	if l.frozen == nil {
		l.frozen, l.snap = l.ps[0].Freeze(), snapOf(l.ps[0])
	}
	for _, q := range append(l.ps[:len(l.ps):len(l.ps)], l.quiet) {
		if err := checkWindows(q); err != nil {
			l.t.Fatalf("record %d (%q): %v", l.n, data[0], err)
		}
	}
	c0, u0 := l.ps[0].Capacity()
	if u0.Rows < 0 || u0.Bytes < 0 || l.ps[0].held < 0 || l.ps[0].held > len(l.ps[0].rows) {
		l.t.Fatalf("record %d (%q): usage %+v, %d rows held", l.n, data[0], u0, l.ps[0].held)
	}
	for _, q := range append(l.ps[1:], l.quiet) {
		if c, u := q.Capacity(); !reflect.DeepEqual(c, c0) || u != u0 {
			l.t.Fatalf("record %d (%q): capacity %+v used %+v, a copy has %+v %+v", l.n, data[0], c0, u0, c, u)
		}
	}
	for i := 1; i < len(out); i++ {
		if !reflect.DeepEqual(out[0], out[i]) {
			l.t.Fatalf("record %d (%q): the original gave %+v, restored copy %d gave %+v", l.n, data[0], out[0], i, out[i])
		}
	}
	return out
}

func recordHistory(t *testing.T, seed uint64) { recordHistoryOf(t, seed, false) }

func recordHistoryOf(t *testing.T, seed uint64, wide bool) {
	rng := rand.New(rand.NewPCG(seed, 2))
	l := &logger{t: t, rng: rng, now: 1_000_000, ps: []*Partition{New()}, quiet: New(), over: New(), under: New(), wide: wide}
	keys := make([]string, 16)
	for i := range keys {
		keys[i] = fmt.Sprintf("g%d/k%d", i%4, i)
	}
	tags := []any{int64(-3), uint64(3), math.Copysign(0, -1), 1.5, "s", []byte{1, 2}, []any{int64(1), "x"},
		map[string]any{"a": uint64(1)}, true, nil}
	sels := []Select{{Fields: []string{"a"}}, {Fields: []string{"a", "b"}, Group: Group{Tag: "uid", Size: 2}},
		{Fields: []string{"b"}, Stale: Stale{Tag: "v"}},
		{Fields: []string{"a"}, Group: Group{Tag: "uid", Size: 3, Deadline: time.Second, Partial: true}},
		{Fields: []string{"a"}, Group: Group{Tag: "uid", Size: 2, Deadline: 2 * time.Second}}}
	ops := []metadata.SettleOp{metadata.Ack, metadata.Nack, metadata.Extend}
	if wide {
		sels = append(sels, Select{Fields: []string{"b"}, Stale: Stale{Tag: "v", Drop: true}})
		ops = append(ops, metadata.Drop, metadata.Retry, metadata.Undo, metadata.EndBatch)
	}
	some := func() []string {
		var ks []string
		for _, k := range keys {
			if rng.IntN(3) == 0 {
				ks = append(ks, k)
			}
		}
		return ks
	}
	var tokens, waiting []string
	for step := range 250 {
		l.now += int64(rng.IntN(3)) * 300_000
		p := l.ps[0]
		switch rng.IntN(15) {
		case 0, 1, 2:
			ks := some()
			fields := [][]string{{"a"}, {"b"}, {"a", "b"}}[rng.IntN(3)]
			n := p.NewKeys(ks)
			var sizes []int64 // none, one per field, or per cell
			switch rng.IntN(3) {
			case 1:
				sizes = make([]int64, len(ks)*len(fields))
				for j := range fields {
					for i := range ks {
						sizes[j*len(ks)+i] = int64(10 * (j + 1))
					}
				}
			case 2:
				sizes = make([]int64, len(ks)*len(fields))
				for i := range sizes {
					sizes[i] = int64(rng.IntN(100))
				}
			}
			res := l.apply(PrepareRecord(ks, fields, sizes, n), n)[0]
			var full *metadata.FullError
			if errors.As(res.Err, &full) {
				if c, _ := p.Capacity(); !c.Bounded() {
					t.Fatalf("refused with no bound: %v", full)
				}
				continue
			}
			if res.Err != nil {
				t.Fatal(res.Err)
			}
			if rng.IntN(5) == 0 {
				continue // a put that never commits
			}
			ups := make([]metadata.RowUpdate, len(ks))
			for i, k := range ks {
				f := map[string]metadata.FieldInfo{}
				for name, g := range res.Reservations[i].Gens {
					f[name] = metadata.FieldInfo{DType: "float32", Shape: []int64{int64(i % 3)}, Gen: g}
				}
				ups[i] = metadata.RowUpdate{Key: k, Index: res.Reservations[i].Index, Fields: f}
				if rng.IntN(2) == 0 {
					ups[i].Tag = map[string]any{"uid": int64(rng.IntN(3)), "v": int64(rng.IntN(5)), "x": tags[rng.IntN(len(tags))]}
				}
			}
			rec, err := CommitRecord(ups)
			if err != nil {
				t.Fatal(err)
			}
			l.apply(rec, 0)
		case 3:
			if rng.IntN(3) == 0 {
				c := metadata.Capacity{Rows: int64(rng.IntN(12)), Bytes: int64(rng.IntN(4)) * 300}
				if rng.IntN(2) == 0 {
					c.ClearAcked = []string{"t0", "t1", "t2"}[:1+rng.IntN(2)]
				}
				l.apply(CapacityRecord(c), 0)
				break
			}
			l.apply(DeleteRecord(some()), 0)
		case 4:
			if rng.IntN(4) == 0 {
				l.apply(DeletePartitionRecord(), 0)
			} else {
				l.apply(AbortRecord(time.Duration(rng.IntN(2))*time.Second), 0)
			}
		case 5:
			g := p.Garbage()
			if len(g) > 0 {
				l.apply(SweptRecord(g[:rng.IntN(len(g))+1]), 0)
			}
		case 6, 7, 8:
			sel := sels[rng.IntN(len(sels))]
			a := &ClaimArgs{Task: fmt.Sprint("t", rng.IntN(3)), Token: fmt.Sprint("tok", step), Lease: time.Second,
				Rows: 1 + rng.IntN(4), Min: 1, MaxDeliveries: rng.IntN(3), Select: sel, Floor: float64(rng.IntN(4))}
			if rng.IntN(4) == 0 {
				a.Batch = &metadata.Batch{Ranks: 2, Rank: rng.IntN(2)}
			}
			if rng.IntN(4) == 0 {
				rows, _ := p.Candidates(p.Now(), a.Task, sel, a.Floor, 10)
				a.Custom = true
				for _, r := range rows {
					a.Units = append(a.Units, []uint64{r.Index})
				}
			}
			if rng.IntN(3) == 0 {
				a.Hold = 2 * time.Second
			}
			if len(waiting) > 0 && rng.IntN(3) == 0 {
				a.Replaces = waiting[rng.IntN(len(waiting))]
			}
			res := l.apply(ClaimRecord(a), 0)[0]
			if res.Claimed.Lease != "" {
				tokens = append(tokens, res.Claimed.Lease)
			}
			if res.Claimed.Waiting != "" {
				waiting = append(waiting, res.Claimed.Waiting)
			}
			if wide && len(res.Claimed.Rows) > 1 && rng.IntN(3) == 0 { // some of its rows handed back
				var idx []uint64
				for _, r := range res.Claimed.Rows[:len(res.Claimed.Rows)/2] {
					idx = append(idx, r.Index)
				}
				l.apply(SettleRecord(&SettleArgs{Task: a.Task, Op: metadata.Unwait, Lease: res.Claimed.Lease, Indexes: idx}), 0)
			}
		case 9:
			if len(tokens) == 0 {
				continue
			}
			var idx []uint64
			for _, r := range p.List() {
				if rng.IntN(2) == 0 {
					idx = append(idx, r.Index)
				}
			}
			op := ops[rng.IntN(len(ops))]
			reason := ""
			if op == metadata.Nack && rng.IntN(2) == 0 {
				reason = fmt.Sprint("why ", rng.IntN(3))
			}
			req := &SettleArgs{Task: fmt.Sprint("t", rng.IntN(3)), Op: op, Lease: tokens[rng.IntN(len(tokens))],
				Indexes: idx, Delay: time.Second, Reason: reason}
			switch op {
			case metadata.Retry, metadata.Drop:
				req.Lease = "" // a row's, not a lease's
			case metadata.Undo:
				req.Indexes = nil // a claim's, not rows'
			}
			if res := l.apply(SettleRecord(req), 0)[0]; res.Err != nil {
				t.Fatalf("settle %+v: %v", req, res.Err)
			}
			if len(waiting) > 0 && rng.IntN(3) == 0 {
				l.apply(SettleRecord(&SettleArgs{Task: fmt.Sprint("t", rng.IntN(3)), Op: metadata.Unwait, Lease: waiting[rng.IntN(len(waiting))]}), 0)
			}
		case 10:
			var idx []uint64
			if rng.IntN(2) == 0 {
				idx = []uint64{}
				for _, r := range p.List() {
					if rng.IntN(2) == 0 {
						idx = append(idx, r.Index)
					}
				}
			}
			l.apply(ResetRecord(fmt.Sprint("t", rng.IntN(3)), idx), 0)
		case 11:
			l.apply(FenceRecord([]uint64{rng.Uint64()}), 0)
		case 12:
			l.apply(DeleteFieldsRecord(some(), [][]string{{"a"}, {"b"}, {"a", "b"}}[rng.IntN(3)]), 0)
		case 13:
			n := 1 + rng.IntN(6)
			l.apply(BlockRecord([][]string{{"a"}, {"b"}, {"a", "b"}}[rng.IntN(3)], n), n)
		case 14:
			blockHistoryStep(l, p, some)
		}
		if rng.IntN(8) == 0 {
			snap, err := p.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			q, err := Restore(snap)
			if err != nil {
				t.Fatalf("step %d: Restore: %v", step, err)
			}
			again, err := q.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(snap, again) {
				t.Fatalf("step %d: a restored partition snapshots differently", step)
			}
			l.ps = append(l.ps, q)
			if len(l.ps) > 4 {
				l.ps = append(l.ps[:1], l.ps[2:]...)
			}
		}
	}
	want, _ := l.ps[0].Snapshot()
	if got, _ := l.quiet.Snapshot(); !slices.Equal(got, want) {
		t.Fatalf("a copy that replayed every record without results holds another state")
	}
	for i, p := range l.ps {
		if i > 0 && !reflect.DeepEqual(p.Consumption(0), l.ps[0].Consumption(0)) {
			t.Fatalf("restored copy %d: consumption %v, original %v", i, p.Consumption(0), l.ps[0].Consumption(0))
		}
		if i > 0 && !reflect.DeepEqual(p.List(), l.ps[0].List()) {
			t.Fatalf("restored copy %d lists other rows", i)
		}
	}
}

// blockHistoryStep puts some keys at untaken indexes of a live block, or
// releases a block: the keys may have rows (a refusal), the indexes may
// be taken (a refusal), the sizes may not fit the capacity.
func blockHistoryStep(l *logger, p *Partition, some func() []string) {
	rng := l.rng
	if len(p.blocks) == 0 {
		return
	}
	b := p.blocks[rng.IntN(len(p.blocks))]
	if rng.IntN(4) == 0 {
		var written []uint64
		for off := range uint64(b.n) {
			if rng.IntN(2) == 0 {
				written = append(written, b.base+off)
			}
		}
		l.apply(ReleaseRecord(b.base+uint64(rng.IntN(2)), b.token+uint64(rng.IntN(4)/3), written), 0) // a token not the block's, at times
		return
	}
	ks := some()
	if rng.IntN(3) > 0 { // keys with no row, mostly
		for i := range ks {
			ks[i] = fmt.Sprintf("g%d/n%d", i%4, l.n)
		}
		ks = ks[:min(len(ks), 1+rng.IntN(4))]
		if len(ks) > 1 && rng.IntN(8) == 0 {
			ks[1] = ks[0] // a key twice: refused as invalid
		}
	}
	off := uint64(rng.IntN(int(b.n)))
	ks = ks[:min(len(ks), int(b.n)-int(off))]
	fields := b.fields
	if len(fields) > 1 && rng.IntN(2) == 0 {
		fields = fields[rng.IntN(len(fields)):][:1]
	}
	if rng.IntN(10) == 0 {
		fields = []string{"c"} // not the block's
	}
	var sizes []int64
	if rng.IntN(2) == 0 {
		sizes = make([]int64, len(ks)*len(fields))
		for i := range sizes {
			sizes[i] = int64(rng.IntN(100))
		}
	}
	ups := make([]metadata.RowUpdate, len(ks))
	for i, k := range ks {
		f := map[string]metadata.FieldInfo{}
		for _, name := range fields {
			f[name] = metadata.FieldInfo{DType: "int8", Shape: []int64{int64(i % 2)}}
		}
		ups[i] = metadata.RowUpdate{Key: k, Index: b.base + off + uint64(i), Fields: f}
		if rng.IntN(2) == 0 {
			ups[i].Tag = map[string]any{"uid": int64(rng.IntN(3)), "v": int64(rng.IntN(5))}
		}
	}
	rec, err := PutNewRecord(b.base+off, b.token+uint64(rng.IntN(10)/9), fields, sizes, ups) // a token not the block's, at times
	if err != nil {
		l.t.Fatal(err)
	}
	res := l.apply(rec, 0)[0]
	var full *metadata.FullError
	switch {
	case res.Err == nil, errors.Is(res.Err, backends.ErrConflict), errors.As(res.Err, &full), errors.Is(res.Err, backends.ErrInvalid):

	default:
		l.t.Fatalf("PutNew: %v", res.Err)
	}
}

// A record appended after a fence that voids its ID applies nothing.
func TestFenceVoids(t *testing.T) {
	p := New()
	p.Apply(&backends.Entry{N: 1, ID: 7, Time: 1000, Data: FenceRecord([]uint64{42})})
	r := p.Apply(&backends.Entry{N: 2, ID: 42, Time: 2000, Data: PrepareRecord([]string{"k"}, []string{"f"}, nil, 1)})
	if r.Err != ErrVoid || p.NewKeys([]string{"k"}) != 1 {
		t.Fatalf("a voided record: %v", r.Err)
	}
	later := int64(1000) + voidFor.Microseconds() + 1
	r = p.Apply(&backends.Entry{N: 3, ID: 42, Time: later, Data: PrepareRecord([]string{"k"}, []string{"f"}, nil, 1)})
	if r.Err != nil || p.NewKeys([]string{"k"}) != 0 {
		t.Fatalf("a record once its void lapsed: %v", r.Err)
	}
}

// Corrupt records and snapshots are errors, never panics.
func FuzzApply(f *testing.F) {
	a := &ClaimArgs{Task: "t", Token: "x", Lease: time.Second, Rows: 2, Min: 1, Batch: &metadata.Batch{Ranks: 2},
		Select: Select{Fields: []string{"a"}, Group: Group{Tag: "g", Size: 2}}, Custom: true, Units: [][]uint64{{1, 2}}}
	rec, _ := CommitRecord([]metadata.RowUpdate{{Key: "k", Index: 1, Fields: map[string]metadata.FieldInfo{"a": {}}, Tag: map[string]any{"g": int64(1)}}})
	for _, b := range [][]byte{PrepareRecord([]string{"k"}, []string{"a"}, nil, 1), rec, ClaimRecord(a), DeleteRecord([]string{"k"}),
		SettleRecord(&SettleArgs{Task: "t", Op: metadata.Ack, Lease: "x", Indexes: []uint64{1}}), ResetRecord("t", nil),
		AbortRecord(time.Second), SweptRecord([]metadata.Ref{{Index: 1, Field: "a"}}), FenceRecord([]uint64{3}),
		PrepareRecord([]string{"k", "m"}, []string{"a", "b"}, []int64{4, 4, 1, 2}, 1),
		CapacityRecord(metadata.Capacity{Rows: 1, Bytes: 10, ClearAcked: []string{"t"}}),
		DeleteFieldsRecord([]string{"k"}, []string{"a"})} {
		f.Add(b)
	}
	p := New()
	p.Apply(&backends.Entry{N: 1, ID: 1, Time: 1, Data: PrepareRecord([]string{"k"}, []string{"a"}, nil, 1)})
	p.Apply(&backends.Entry{N: 2, ID: 2, Time: 2, Data: rec})
	p.Apply(&backends.Entry{N: 3, ID: 3, Time: 3, Data: CapacityRecord(metadata.Capacity{Rows: 3, ClearAcked: []string{"t"}})})
	snap, _ := p.Snapshot()
	f.Add(snap)
	f.Fuzz(func(t *testing.T, b []byte) {
		q := New()
		q.Apply(&backends.Entry{N: 1, ID: 1, Time: 1, Data: PrepareRecord([]string{"k"}, []string{"a"}, nil, 1)})
		q.Apply(&backends.Entry{N: 2, ID: 2, Time: 2, Data: rec})
		q.Apply(&backends.Entry{N: 3, ID: 3, Time: 3, Data: b})
		if r, err := Restore(b); err == nil {
			if _, err := r.Snapshot(); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func snapOf(p *Partition) []byte { b, _ := p.Snapshot(); return b }

// Rows read one after another with equal tags share one map (a
// partition's memory per row), and keep their own values otherwise:
// from a commit record, and from a snapshot.
func TestEqualTagsShareAMap(t *testing.T) {
	a := map[string]any{"uid": "p1", "version": int64(3)}
	b := map[string]any{"uid": "p1", "version": int64(4)}
	keys := []string{"k0", "k1", "k2", "k3"}
	tags := []map[string]any{a, maps.Clone(a), b, nil}
	p := New()
	res, err := p.Prepare(1, keys, []string{"f"}, nil, 0, len(keys))
	if err != nil {
		t.Fatal(err)
	}
	ups := make([]metadata.RowUpdate, len(keys))
	for i := range ups {
		ups[i] = metadata.RowUpdate{Key: keys[i], Index: res[i].Index, Fields: map[string]metadata.FieldInfo{"f": {}}, Tag: tags[i]}
	}
	rec, err := CommitRecord(ups)
	if err != nil {
		t.Fatal(err)
	}
	e := backends.Entry{N: 1, ID: 1, Time: 2, Data: rec}
	if r := p.Apply(&e); r.Err != nil {
		t.Fatal(r.Err)
	}
	snap, err := p.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	q, err := Restore(snap)
	if err != nil {
		t.Fatal(err)
	}
	for name, st := range map[string]*Partition{"commit": p, "snapshot": q} {
		rows := st.List()
		if len(rows) != 4 {
			t.Fatalf("%s: %d rows", name, len(rows))
		}
		for i, r := range rows {
			if !reflect.DeepEqual(r.Tag, tags[i]) {
				t.Errorf("%s: row %q's tag %v, want %v", name, r.Key, r.Tag, tags[i])
			}
		}
		same := func(x, y map[string]any) bool {
			return reflect.ValueOf(x).UnsafePointer() == reflect.ValueOf(y).UnsafePointer()
		}
		if !same(rows[0].Tag, rows[1].Tag) {
			t.Errorf("%s: rows k0 and k1, of equal tags, hold two maps", name)
		}
		if same(rows[1].Tag, rows[2].Tag) {
			t.Errorf("%s: rows k1 and k2, of different tags, share a map", name)
		}
	}
}
