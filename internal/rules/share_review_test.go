package rules

import (
	"flag"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
)

// histories is how many random histories TestRecordsReshared runs.
var histories = flag.Int("histories", 30, "random histories TestRecordsReshared runs")

// overshare makes p's rows share their immutable state as widely as the
// rules allow, not just as the changes that made it do: every committed
// row with no reservation pending in a window shares one copy of each
// distinct field generations, and every entry of every task one copy of
// each distinct entry. A change that writes through state it shares
// rather than replacing it then changes rows it did not name.
func overshare(p *Partition) {
	gens := map[string][]fieldGen{}
	for _, k := range slices.Sorted(maps.Keys(p.rows)) {
		r := p.rows[k]
		if r.view == nil || len(r.gens) == 0 || slices.ContainsFunc(r.gens, func(g fieldGen) bool { return g.w != 0 }) {
			continue
		}
		key := fmt.Sprintf("%#v", r.gens)
		if gens[key] == nil {
			gens[key] = slices.Clip(slices.Clone(r.gens))
		}
		r.gens, r.shared = gens[key], true
	}
	entries := map[entry]*entry{}
	for _, t := range p.tasks {
		for i, e := range t.entries {
			s := entries[*e]
			if s == nil {
				s = e
				entries[*e] = e
			}
			t.entries[i] = s
			if t.cnt != nil && t.cnt.leased[i] == e {
				t.cnt.leased[i] = s
			}
		}
	}
}

// Partitions whose rows share all they may, or nothing, apply every
// record of a history that uses every settle op as one whose rows share
// what its changes made them share: their results, state and summaries
// are the same (a write through shared state would change rows it should
// not). -histories sets how many histories it runs.
func TestRecordsReshared(t *testing.T) {
	for seed := range uint64(*histories) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { recordHistoryOf(t, 1000+seed, true) })
	}
}

// undershare gives each of p's rows its own copy of its immutable
// state: a change that writes through state its rows share changes only
// the rows it names here.
func undershare(p *Partition) {
	for _, r := range p.rows {
		r.gens, r.shared = slices.Clone(r.gens), false
	}
	for _, t := range p.tasks {
		for i, e := range t.entries {
			c := new(entry)
			*c = *e
			t.entries[i] = c
			if t.cnt != nil && t.cnt.leased[i] == e {
				t.cnt.leased[i] = c
			}
		}
	}
}

// reshareApply applies e to l.over and l.under, checks each gives what
// the original gave and holds the same state, and overshares l.over and
// undershares l.under for the next record.
func (l *logger) reshareApply(e *backends.Entry, want Result, served []Claimed, what string) {
	l.t.Helper()
	for _, c := range []struct {
		name string
		p    *Partition
	}{{"overshared", l.over}, {"undershared", l.under}} {
		res, ful := c.p.Apply(e), c.p.TakeFulfilled()
		if !reflect.DeepEqual(res, want) {
			l.t.Fatalf("%s: the %s copy gave %+v, the original %+v", what, c.name, res, want)
		}
		if !reflect.DeepEqual(ful, served) {
			l.t.Fatalf("%s: the %s copy fulfilled %+v, the original %+v", what, c.name, ful, served)
		}
		if a, b := snapOf(l.ps[0]), snapOf(c.p); !slices.Equal(a, b) {
			l.t.Fatalf("%s: the %s copy's state differs after it", what, c.name)
		}
		if err := checkWindows(c.p); err != nil {
			l.t.Fatalf("%s: %s copy: %v", what, c.name, err)
		}
		c0, u0 := l.ps[0].Capacity()
		if cc, u := c.p.Capacity(); !reflect.DeepEqual(cc, c0) || u != u0 {
			l.t.Fatalf("%s: capacity %+v used %+v, the %s copy %+v %+v", what, c0, u0, c.name, cc, u)
		}
		if !reflect.DeepEqual(c.p.List(), l.ps[0].List()) {
			l.t.Fatalf("%s: the %s copy lists other rows", what, c.name)
		}
		if a, b := l.ps[0].Consumption(0), c.p.Consumption(0); !reflect.DeepEqual(a, b) {
			l.t.Fatalf("%s: consumption %v, the %s copy's %v", what, a, c.name, b)
		}
	}
	if l.wide {
		req := metadata.SummaryRequest{Counts: true}
		want := l.ps[0].Summary(l.now, req)
		for i, p := range append(l.ps[1:], l.over, l.under) {
			if got := p.Summary(l.now, req); !reflect.DeepEqual(got, want) {
				l.t.Fatalf("%s: copy %d summarizes %+v, the original %+v", what, i+1, got, want)
			}
		}
	}
	overshare(l.over)
	undershare(l.under)
}

// A rank that takes its share of a batch after the lease of some of its
// rows ended renews them: they are leased again, no longer ready, and a
// claim that is not the batch's finds none of them (as a partition
// restored from a snapshot does).
func TestShareRenewsEndedLeases(t *testing.T) {
	l := &logged{p: New()}
	l.put(t, 1, "k1", "k2")
	opened := rankClaim(t, l, 2, 2, 0, "r0")
	if len(opened.Rows) != 2 {
		t.Fatalf("rank 0 leased %v, want k1, k2", keysOf(opened))
	}
	// k1's lease runs 10 minutes more; k2's ends with the claim's.
	if r, _ := l.at(t, 3, SettleRecord(&SettleArgs{Task: "t", Op: metadata.Extend, Lease: "r0", Indexes: []uint64{opened.Rows[0].Index}, Delay: 10 * time.Minute})); r.Err != nil {
		t.Fatal(r.Err)
	}
	ended := int64(2 + time.Minute.Microseconds() + 1)
	if r, _ := l.at(t, ended, SettleRecord(&SettleArgs{Task: "t", Op: metadata.Nack, Lease: "nobody", Indexes: []uint64{opened.Rows[1].Index}})); r.Err != nil {
		t.Fatal(r.Err) // (a record that moves the clock past k2's lease and brings the index to it)
	}
	took := rankClaim(t, l, ended, 2, 1, "r1")
	if took.Lease != "r0" || len(took.Rows) != 2 {
		t.Fatalf("rank 1 took %+v, want batch r0 of k1, k2", took)
	}
	snap, err := l.p.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	q, err := Restore(snap)
	if err != nil {
		t.Fatal(err)
	}
	claim := ClaimRecord(&ClaimArgs{Task: "t", Token: "c", Lease: time.Minute, Rows: 2, Min: 1, Select: Select{Fields: []string{"f"}}})
	for name, p := range map[string]*Partition{"original": l.p, "restored": q} {
		if ready := p.Ready("t"); ready != 0 {
			t.Errorf("%s: %d rows ready, want none: every row is leased to r0", name, ready)
		}
		res := p.Apply(&backends.Entry{N: 100, ID: 100, Time: ended + 1, Data: claim})
		if res.Err != nil || len(res.Claimed.Rows) != 0 {
			t.Errorf("%s: a claim not the batch's leased %v (%v), want none", name, keysOf(res.Claimed), res.Err)
		}
	}
}

// Rows one put made alike share their field generations; a later put,
// abort, field removal or deletion of one of them changes that row only:
// the others keep their generations and sizes, in the capacity's count
// and through a snapshot.
func TestSharedGensChangeOneRow(t *testing.T) {
	p := New()
	keys := []string{"k0", "k1", "k2", "k3", "k4"}
	put := func(now int64, keys []string, size int64, commit bool) {
		t.Helper()
		sizes := make([]int64, len(keys))
		for i := range sizes {
			sizes[i] = size
		}
		res, err := p.Prepare(now, keys, []string{"f"}, sizes, uint64(100*now), len(keys))
		if err != nil {
			t.Fatal(err)
		}
		if !commit {
			return
		}
		ups := make([]metadata.RowUpdate, len(keys))
		for i, k := range keys {
			ups[i] = metadata.RowUpdate{Key: k, Index: res[i].Index, Fields: map[string]metadata.FieldInfo{"f": {Gen: res[i].Gens["f"]}}}
		}
		if _, err := p.Commit(now, ups); err != nil {
			t.Fatal(err)
		}
	}
	put(1, keys, 10, true)
	for _, k := range keys {
		if r := p.rows[k]; !r.shared || &r.gens[0] != &p.rows["k0"].gens[0] {
			t.Fatalf("row %s: shared %v: the rows of one put, alike, do not share their generations", k, r.shared)
		}
	}
	put(2, []string{"k1"}, 50, true)  // a newer, larger write of k1
	put(3, []string{"k2"}, 70, false) // a put of k2 in progress
	p.Abort(4, 3)                     // ... given up
	p.DeleteFields(5, []string{"k3"}, []string{"f"})
	p.Delete(6, []string{"k4"})
	if err := checkWindows(p); err != nil {
		t.Fatal(err)
	}
	want := map[string]fieldGen{"k0": {field: "f", next: 1, size: 10}, "k1": {field: "f", next: 2, size: 50},
		"k2": {field: "f", next: 2, size: 70}, "k3": {field: "f", next: 1}}
	check := func(name string, p *Partition) {
		t.Helper()
		for k, g := range want {
			if r := p.rows[k]; len(r.gens) != 1 || r.gens[0] != g {
				t.Errorf("%s: row %s has generations %+v, want %+v", name, k, r.gens, g)
			}
		}
		if _, u := p.Capacity(); u.Bytes != 10+50+70 || u.Rows != 4 {
			t.Errorf("%s: the capacity counts %+v, want 4 rows of 130 bytes", name, u)
		}
	}
	check("original", p)
	snap, err := p.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	q, err := Restore(snap)
	if err != nil {
		t.Fatal(err)
	}
	check("restored", q)
}

// The rows one claim leases share an entry; a nack, an extension, an ack
// or a hand-back of one of them changes that row only.
func TestSharedEntryChangeOneRow(t *testing.T) {
	ops := map[string]metadata.SettleOp{"nack": metadata.Nack, "extend": metadata.Extend, "ack": metadata.Ack, "unwait": metadata.Unwait}
	for name, op := range ops {
		t.Run(name, func(t *testing.T) {
			l := &logged{p: New()}
			l.put(t, 1, "k0", "k1", "k2")
			res, _ := l.at(t, 2, ClaimRecord(&ClaimArgs{Task: "t", Token: "c", Lease: time.Minute, Rows: 3, Min: 3, Select: Select{Fields: []string{"f"}}}))
			if res.Err != nil || len(res.Claimed.Rows) != 3 {
				t.Fatalf("claim: %v %v", keysOf(res.Claimed), res.Err)
			}
			tk := l.p.tasks["t"]
			i0, i1, i2 := res.Claimed.Rows[0].Index, res.Claimed.Rows[1].Index, res.Claimed.Rows[2].Index
			if tk.entries[i0] != tk.entries[i1] || tk.entries[i1] != tk.entries[i2] {
				t.Fatal("the rows one claim leased alike do not share an entry")
			}
			before := l.p.Consumption(3, "t")["t"]
			req := &SettleArgs{Task: "t", Op: op, Lease: "c", Indexes: []uint64{i1}, Delay: time.Hour}
			if op == metadata.Nack {
				req.Reason = "bad"
			}
			if r, _ := l.at(t, 3, SettleRecord(req)); r.Err != nil || len(r.Settled.Lost) > 0 {
				t.Fatalf("%v of one row: %v %+v", op, r.Err, r.Settled)
			}
			after := l.p.Consumption(3, "t")["t"]
			byIndex := func(ds []metadata.Delivery) map[uint64]metadata.Delivery {
				m := map[uint64]metadata.Delivery{}
				for _, d := range ds {
					m[d.Index] = d
				}
				return m
			}
			b, a := byIndex(before), byIndex(after)
			if reflect.DeepEqual(a[i1], b[i1]) {
				t.Errorf("%s left the row it named as it was: %+v", name, a[i1])
			}
			for _, i := range []uint64{i0, i2} {
				if !reflect.DeepEqual(a[i], b[i]) {
					t.Errorf("%s of one row changed row %d: %+v, was %+v", name, i, a[i], b[i])
				}
			}
			if err := checkWindows(l.p); err != nil {
				t.Error(err)
			}
		})
	}
}
