package redis

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"testing"

	"github.com/tqgo/tqgo/backends"
)

// FuzzViewApply checks view replay, without a server:
//
//  1. Arbitrary records (a, b, c; empty ones left out) fed to a fresh
//     view's catchUp never panic, any error matches ErrCorrupt (and leaves
//     the view marked for a full read), and replay is deterministic: all
//     at once or one by one, into two views, gives the same state.
//  2. Round trip: ops (a little program over 4 keys and 3 fields) run
//     against a writer's view the way Meta does (prepare/installPrepare,
//     commit/installCommit, delete/installDelete, snapshot) while their
//     records (prepareRecord with the script's base, commitRecord,
//     deleteRecord, the snapshot) are replayed into a reader's view; after
//     every op both views, and a fresh view built from a snapshot of the
//     writer's, hold the same state, the reservations match the replayed
//     rows, and the committed-row deltas add up to the committed rows.
func FuzzViewApply(f *testing.F) {
	pre := prepareRecord([]string{"a", "b"}, []string{"f"})
	setID(pre, newID())
	prep := string(pre[:bodyAt]) + "7:1000" + string(pre[bodyAt:])
	com, _ := commitRecord([]backends.RowUpdate{
		{Key: "a", Index: 7, Fields: map[string]backends.FieldInfo{"f": {DType: "u8", Shape: []int64{2}, Gen: 0, BackendTag: "t"}}, Tag: map[string]any{"i": int64(3), "s": "x"}},
		{Key: "b", Index: 8, Tag: map[string]any{"b": true, "f": 0.5}},
	})
	w := newView()
	w.installPrepare(w.prepare([]string{"a", "c"}, []string{"f", "g"}), []string{"a", "c"}, []string{"f", "g"}, 3, 1000)
	if c, err := w.commit("", []backends.RowUpdate{{Key: "a", Index: 3, Fields: map[string]backends.FieldInfo{}, Tag: map[string]any{}}}); err == nil {
		w.installCommit(c)
	}
	snap, _ := w.snapshot()
	del := deleteRecord([]string{"a", "zz"})
	for _, r := range [][]byte{com, snap, del} {
		setID(r, newID())
	}
	id := "0123456789abcdef"

	f.Add([]byte(prep), com, del, []byte{0x00, 0x13, 0x21, 0x47, 0x02, 0x31, 0xa5, 0x0b})
	f.Add(snap, []byte("P"+id+"9:5:\x91\xa1f\x91\xa1c"), com, []byte{0x03, 0x20, 0x61, 0xff, 0x30, 0x0e, 0x13, 0x25})
	f.Add([]byte("S"+id+"\x90\x90"), []byte("C"+id+"\x90\x91\xa1a\x01\x05\xc0"), []byte("D"+id+"\x9f"), []byte{0x10, 0x07, 0x33, 0x01, 0x0f, 0x41, 0x52, 0x12, 0x63, 0x70})
	f.Add([]byte("P"+id+"1:2:\x90\x90"), []byte("F"+id), []byte{}, []byte{})

	f.Fuzz(func(t *testing.T, a, b, c, ops []byte) {
		var recs []string
		for _, r := range [][]byte{a, b, c} {
			if len(r) > 0 {
				recs = append(recs, string(r))
			}
		}
		replayRecords(t, recs)
		roundTrip(t, ops)
	})
}

// headOf is the head of a log of recs appended to one whose head is head
// (see chainHead); the ids of records too short to have one count as "".
func headOf(head string, recs []string) string {
	for _, r := range recs {
		id, _ := recordID(r)
		head = chainHead(head, id)
	}
	return head
}

func replayRecords(t *testing.T, recs []string) {
	v := newView()
	_, err := v.catchUp(v.era, 0, "e", 0, headOf("", recs), recs)
	if err != nil {
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("catchUp error %v does not match ErrCorrupt", err)
		}
		if v.epoch != badEpoch || len(v.rows) != 0 {
			t.Fatalf("after error %v the view is at epoch %q with %d rows, want reset to badEpoch", err, v.epoch, len(v.rows))
		}
		return
	}
	if v.epoch != "e" || v.n != int64(len(recs)) {
		t.Fatalf("catchUp of %d records: epoch %q, n %d", len(recs), v.epoch, v.n)
	}
	one := newView()
	for i, r := range recs {
		if _, err := one.catchUp(one.era, int64(i), "e", int64(i), headOf(one.head, []string{r}), []string{r}); err != nil {
			t.Fatalf("record %d alone: %v; all at once: no error", i, err)
		}
	}
	if d := diffViews(v, one); d != "" {
		t.Fatalf("records at once and one by one differ: %s", d)
	}
}

// rowState is what a view holds for one key, in comparable form.
type rowState struct {
	index uint64
	gens  map[string]uint64
	pend  map[string]string // each field's reservations, printed
	row   *backends.Row
}

func viewState(v *view) map[string]rowState {
	out := make(map[string]rowState, len(v.rows))
	for k, r := range v.rows {
		g := make(map[string]uint64, len(r.gens))
		pend := make(map[string]string, len(r.gens))
		for _, x := range r.gens {
			if _, dup := g[x.field]; !dup {
				g[x.field] = x.next
				if len(x.pend) > 0 {
					pend[x.field] = fmt.Sprint(x.pend)
				}
			}
		}
		out[k] = rowState{index: r.index, gens: g, pend: pend, row: r.row}
	}
	return out
}

// diffViews describes how the states of x and y differ ("" for none). A
// nil and an empty map or Shape are equal (as the conformance suite has
// it); tag values must match in type.
func diffViews(x, y *view) string {
	a, b := viewState(x), viewState(y)
	for _, k := range slices.Sorted(maps.Keys(a)) {
		ra, ok := b[k]
		rx := a[k]
		if !ok {
			return fmt.Sprintf("key %q only in the first", k)
		}
		if rx.index != ra.index || !maps.Equal(rx.gens, ra.gens) || !maps.Equal(rx.pend, ra.pend) {
			return fmt.Sprintf("key %q: index %d gens %v pending %v vs index %d gens %v pending %v", k, rx.index, rx.gens, rx.pend, ra.index, ra.gens, ra.pend)
		}
		if (rx.row == nil) != (ra.row == nil) {
			return fmt.Sprintf("key %q: committed %v vs %v", k, rx.row != nil, ra.row != nil)
		}
		if rx.row != nil {
			if d := diffRows(rx.row, ra.row); d != "" {
				return fmt.Sprintf("key %q: %s", k, d)
			}
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			return fmt.Sprintf("key %q only in the second", k)
		}
	}
	if gx, gy := cellSet(x.garbage, nil), cellSet(y.garbage, nil); !slices.Equal(gx, gy) {
		return fmt.Sprintf("garbage %v vs %v", gx, gy)
	}
	if ox, oy := cellSet(nil, x.orphans), cellSet(nil, y.orphans); !slices.Equal(ox, oy) {
		return fmt.Sprintf("orphans %v vs %v", ox, oy)
	}
	if x.pending != y.pending {
		return fmt.Sprintf("pending %d vs %d", x.pending, y.pending)
	}
	return ""
}

// cellSet prints refs and orphans, sorted: their order in a view depends
// on map iteration and says nothing.
func cellSet(refs []backends.Ref, orphans []pendingRef) []string {
	var out []string
	for _, r := range refs {
		out = append(out, fmt.Sprintf("%d@%s#%d/%s", r.Index, r.Field, r.Gen, r.Tag))
	}
	for _, o := range orphans {
		out = append(out, fmt.Sprintf("%d@%s#%d@%d", o.ref.Index, o.ref.Field, o.ref.Gen, o.at))
	}
	slices.Sort(out)
	return out
}

func diffRows(x, y *backends.Row) string {
	if x.Key != y.Key || x.Index != y.Index {
		return fmt.Sprintf("row %q@%d vs %q@%d", x.Key, x.Index, y.Key, y.Index)
	}
	if len(x.Fields) != len(y.Fields) {
		return fmt.Sprintf("fields %v vs %v", x.Fields, y.Fields)
	}
	for f, fx := range x.Fields {
		fy, ok := y.Fields[f]
		if !ok || fx.DType != fy.DType || !slices.Equal(fx.Shape, fy.Shape) || fx.Gen != fy.Gen || fx.BackendTag != fy.BackendTag {
			return fmt.Sprintf("field %q: %+v vs %+v", f, fx, fy)
		}
	}
	if len(x.Tag) != len(y.Tag) {
		return fmt.Sprintf("tag %#v vs %#v", x.Tag, y.Tag)
	}
	for k, tx := range x.Tag {
		ty, ok := y.Tag[k]
		if !ok || !sameTagValue(tx, ty) {
			return fmt.Sprintf("tag %q: %#v (%T) vs %#v (%T)", k, tx, tx, ty, ty)
		}
	}
	return ""
}

// sameTagValue is reflect.DeepEqual, but for NaNs of one type (also
// inside arrays and maps), which are the same value here: a NaN a record
// holds replays as a NaN.
func sameTagValue(x, y any) bool {
	switch a := x.(type) {
	case float64:
		if b, ok := y.(float64); ok && math.IsNaN(a) && math.IsNaN(b) {
			return true
		}
	case float32:
		if b, ok := y.(float32); ok && a != a && b != b {
			return true
		}
	case []any:
		b, ok := y.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !sameTagValue(a[i], b[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		b, ok := y.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, v := range a {
			if w, ok := b[k]; !ok || !sameTagValue(v, w) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(x, y)
}

// opReader hands out the bytes of an op program, zeros when it ran out.
type opReader struct{ b []byte }

func (r *opReader) next() byte {
	if len(r.b) == 0 {
		return 0
	}
	x := r.b[0]
	r.b = r.b[1:]
	return x
}

func pick(all []string, mask byte) []string {
	var out []string
	for i, s := range all {
		if mask&(1<<i) != 0 {
			out = append(out, s)
		}
	}
	return out
}

func roundTrip(t *testing.T, ops []byte) {
	keys := []string{"k0", "k1", "k2", "k3"}
	fields := []string{"f0", "f1", "f2"}
	w, r := newView(), newView() // the writer's view, a reader's
	epoch, logN := "e0", int64(0)
	next := uint64(5) // the index counter
	committed := int64(0)
	replay := func(what string, rec []byte) {
		t.Helper()
		head := headOf(r.head, []string{string(rec)})
		if logN == 0 {
			head = headOf("", []string{string(rec)})
		}
		if _, err := r.catchUp(r.era, logN, epoch, logN, head, []string{string(rec)}); err != nil {
			t.Fatalf("%s: replaying its own record: %v", what, err)
		}
		logN++
	}
	check := func(what string) {
		t.Helper()
		if d := diffViews(w, r); d != "" {
			t.Fatalf("after %s: writer and replayed views differ: %s", what, d)
		}
		n := int64(0)
		for _, x := range w.rows {
			if x.row != nil {
				n++
			}
		}
		if n != committed {
			t.Fatalf("after %s: %d committed rows, the deltas add up to %d", what, n, committed)
		}
	}
	in := &opReader{b: ops}
	for step := 0; len(in.b) > 0 && step < 64; step++ {
		op := in.next()
		switch op % 8 {
		case 0: // Prepare
			ks, fs := pick(keys, in.next()), pick(fields, in.next())
			if len(ks) == 0 {
				continue // Meta appends nothing
			}
			p := w.prepare(ks, fs)
			base := next
			next += uint64(len(p.newPos)) + uint64(op>>6) // a Cluster range may be larger
			at := int64(step) * 1000
			w.installPrepare(p, ks, fs, base, at)
			p.setBase(base)
			rec := prepareRecord(ks, fs)
			setID(rec, newID())
			stored := append(rec[:bodyAt:bodyAt], strconv.FormatUint(base, 10)+":"+strconv.FormatInt(at, 10)...)
			replay("prepare", append(stored, rec[bodyAt:]...))
			for i, k := range ks {
				x := r.rows[k]
				if x == nil || x.index != p.res[i].Index {
					t.Fatalf("prepare: reservation %+v of %q, replayed row %+v", p.res[i], k, x)
				}
				for _, f := range fs {
					if g, _ := x.gen(f, 0); g != p.res[i].Gens[f]+1 {
						t.Fatalf("prepare: %q field %q reserved %d, replayed next %d", k, f, p.res[i].Gens[f], g)
					}
				}
			}
			check("prepare")
		case 1: // Commit
			ks := pick(keys, in.next())
			mode := in.next()
			var shared map[string]backends.FieldInfo
			var ups []backends.RowUpdate
			for i, k := range ks {
				x := w.rows[k]
				if x == nil {
					continue
				}
				u := backends.RowUpdate{Key: k, Index: x.index}
				if mode&0x80 != 0 && i == 0 {
					u.Index++ // a stale reservation: conflict
				}
				switch mode & 3 {
				case 0, 1:
					fm := in.next()
					fi := map[string]backends.FieldInfo{}
					for j, f := range pick(fields, fm) {
						var shape []int64
						if fm&0x40 != 0 {
							shape = []int64{int64(j), 2}
						} else if fm&0x20 != 0 {
							shape = []int64{}
						}
						fi[f] = backends.FieldInfo{DType: "d" + f, Shape: shape, Gen: uint64(fm>>(3+j)) % 3, BackendTag: "b"}
					}
					if mode&3 == 1 {
						if shared == nil {
							shared = fi
						}
						fi = shared // rows of a put share one map
					}
					u.Fields = fi
				case 2: // a tag-only update
				case 3:
					u.Fields = map[string]backends.FieldInfo{}
				}
				tv := in.next()
				switch tv % 6 {
				case 1:
					u.Tag = map[string]any{}
				case 2:
					u.Tag = map[string]any{"i": int64(tv) - 100}
				case 3:
					u.Tag = map[string]any{"f": float64(tv) / 4}
				case 4:
					u.Tag = map[string]any{"b": tv%12 == 4, "s": "v" + strconv.Itoa(int(tv))}
				case 5:
					u.Tag = map[string]any{"i": int64(tv) << 40, "s": ""}
				}
				ups = append(ups, u)
			}
			if len(ups) == 0 {
				continue
			}
			if mode&0x40 != 0 { // a key twice in one Commit
				d := ups[0]
				d.Fields = map[string]backends.FieldInfo{"f0": {DType: "again", Gen: uint64(mode>>2) % 3}}
				ups = append(ups, d)
			}
			rec, err := commitRecord(ups)
			if err != nil {
				t.Fatal(err)
			}
			setID(rec, newID())
			c, err := w.commit("p", ups)
			if err != nil {
				if !errors.Is(err, backends.ErrConflict) {
					t.Fatal(err)
				}
				continue // not appended
			}
			w.installCommit(c)
			committed += c.fresh
			replay("commit", rec)
			check("commit")
		case 2: // Delete
			ks := pick(append(keys, "zz"), in.next())
			if len(ks) == 0 {
				continue
			}
			d := w.delete(ks)
			if len(d.keys) == 0 {
				continue
			}
			w.installDelete(d)
			committed -= int64(len(d.rows))
			rec := deleteRecord(d.keys)
			setID(rec, newID())
			replay("delete", rec)
			check("delete")
		case 4: // DeletePartition (a clear record)
			if len(w.rows) == 0 {
				continue
			}
			for _, x := range w.rows {
				if x.row != nil {
					committed--
				}
			}
			w.clear()
			rec := bareRecord(recClear)
			setID(rec, newID())
			replay("clear", rec)
			check("clear")
		case 5: // an abort of reservations made by step cutoff
			cutoff := int64(in.next()%8) * 1000
			w.abort(cutoff)
			rec := bareRecord(recAbort)
			setID(rec, newID())
			replay("abort", append(rec, strconv.FormatInt(cutoff, 10)...))
			check("abort")
		case 6: // swept: some of the garbage and orphans, and a reservation
			mask := in.next()
			var refs []backends.Ref
			for i, r := range w.garbage {
				if mask&(1<<(i%8)) != 0 {
					refs = append(refs, r)
				}
			}
			for i, o := range w.orphans {
				if mask&(1<<((i+3)%8)) != 0 {
					refs = append(refs, o.ref)
				}
			}
			for _, k := range pick(keys, in.next()) {
				if x := w.rows[k]; x != nil && len(x.gens) > 0 && len(x.gens[0].pend) > 0 {
					refs = append(refs, backends.Ref{Index: x.index, Field: x.gens[0].field, Gen: x.gens[0].pend[0].gen})
				}
			}
			if len(refs) == 0 {
				continue
			}
			w.sweep(refs)
			rec := sweptRecord(refs)
			setID(rec, newID())
			replay("swept", rec)
			check("swept")
		case 7: // abandon: a rolled-back put's reservations, and orphans
			var refs []backends.Ref
			for _, k := range pick(keys, in.next()) {
				if x := w.rows[k]; x != nil && len(x.gens) > 0 && len(x.gens[0].pend) > 0 {
					refs = append(refs, backends.Ref{Index: x.index, Field: x.gens[0].field, Gen: x.gens[0].pend[0].gen, Tag: "t"})
				}
			}
			if len(w.orphans) > 0 && op&0x80 != 0 {
				refs = append(refs, w.orphans[0].ref)
			}
			if len(refs) == 0 {
				continue
			}
			w.abandon(refs)
			rec := abandonRecord(refs)
			setID(rec, newID())
			replay("abandon", rec)
			check("abandon")
		case 3: // compaction
			snap, err := w.snapshot()
			if err != nil {
				t.Fatal(err)
			}
			setID(snap, newID())
			epoch, logN = "e"+strconv.Itoa(step+1), 0
			fresh := newView()
			if _, err := fresh.catchUp(fresh.era, 0, epoch, 0, headOf("", []string{string(snap)}), []string{string(snap)}); err != nil {
				t.Fatalf("snapshot: %v", err)
			}
			if d := diffViews(w, fresh); d != "" {
				t.Fatalf("a view built from the writer's snapshot differs: %s", d)
			}
			replay("snapshot", snap) // the reader, on the new epoch
			check("snapshot")
		}
	}
}
