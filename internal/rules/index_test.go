package rules

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends/metadata"
)

// checkIndex compares every indexed task's ready index and group index
// with what a scan of the partition gives.
func checkIndex(t *testing.T, p *Partition, step string) {
	t.Helper()
	for name, tk := range p.tasks {
		if !tk.indexed {
			continue
		}
		p.advance(tk, p.now)
		var want []uint64
		for i, r := range p.byIndex {
			if _, parked := tk.parked[i]; parked {
				continue
			}
			if claimable(tk.entries[i], p.now) && hasFields(r.view, tk.sel.Fields) {
				want = append(want, i)
			}
		}
		slices.Sort(want)
		var got []uint64
		tk.ready.Ascend(func(i uint64) bool { got = append(got, i); return true })
		if !slices.Equal(got, want) {
			t.Fatalf("%s: task %q ready index %v, scan %v", step, name, got, want)
		}
		if tk.vers != nil {
			for _, i := range got {
				v, ok := metadata.TagNumber(p.byIndex[i].view.Tag[tk.sel.Stale.Tag])
				if w, filed := tk.verOf[i]; ok != filed || ok && (v != w || !tk.vers.Has(verKey{v, i})) {
					t.Fatalf("%s: task %q ready row %d of version %v (%v) filed %v (%v)", step, name, i, v, ok, w, filed)
				}
			}
			if tk.vers.Len() != len(tk.verOf) {
				t.Fatalf("%s: task %q: %d versions indexed, %d filed", step, name, tk.vers.Len(), len(tk.verOf))
			}
		}
		for i := range tk.parked {
			if p.byIndex[i] == nil {
				t.Fatalf("%s: task %q parks removed row %d", step, name, i)
			}
		}
		if g := tk.groups; g != nil {
			n := 0
			for id, gr := range g.groups {
				if !slices.IsSorted(gr.members) || len(gr.members) == 0 {
					t.Fatalf("%s: group %q members %v", step, id, gr.members)
				}
				for _, i := range gr.members {
					if _, ok := tk.ready.Get(i); !ok || g.of[i] != id {
						t.Fatalf("%s: group %q holds %d, not ready or filed elsewhere", step, id, i)
					}
					want, _ := groupID(&g.g, p.byIndex[i].view)
					if want != id {
						t.Fatalf("%s: row %d filed under %q, its group is %q", step, i, id, want)
					}
				}
				n += len(gr.members)
				if _, in := g.complete.Get(gr); in != g.full(gr) {
					t.Fatalf("%s: group %q of %d in complete: %v", step, id, len(gr.members), in)
				}
			}
			if n != len(g.of) {
				t.Fatalf("%s: %d grouped rows, %d filed", step, n, len(g.of))
			}
		}
	}
}

// Random histories keep every task's indexes equal to a scan's.
func TestIndexFollowsState(t *testing.T) {
	for seed := range uint64(40) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { indexHistory(t, seed) })
	}
}

func indexHistory(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 1))
	p := New()
	var next uint64
	now := int64(1_000_000)
	keys := make([]string, 24)
	for i := range keys {
		keys[i] = fmt.Sprintf("g%d/k%d", i%5, i)
	}
	sels := map[string]Select{
		"plain":  {Fields: []string{"a"}},
		"both":   {Fields: []string{"a", "b"}},
		"groups": {Fields: []string{"a"}, Group: Group{Tag: "uid", Size: 2}},
		"prefix": {Fields: []string{"b"}, Group: Group{Sep: "/", Size: 3}},
		"stale":  {Fields: []string{"a"}, Stale: Stale{Tag: "v"}},
		"drop":   {Fields: []string{"a"}, Stale: Stale{Tag: "v", Drop: true}},
	}
	names := []string{"plain", "both", "groups", "prefix", "stale", "drop"}
	leases := map[string][]string{} // task -> tokens
	tok := 0
	pickKeys := func() []string {
		var ks []string
		for _, k := range keys {
			if rng.IntN(4) == 0 {
				ks = append(ks, k)
			}
		}
		return ks
	}
	for step := range 300 {
		now += int64(rng.IntN(3)) * 400_000 // leases are a second: some end
		var what string
		switch op := rng.IntN(11); op {
		case 0, 1, 2: // a put of some fields, some tags
			ks := pickKeys()
			fields := [][]string{{"a"}, {"b"}, {"a", "b"}}[rng.IntN(3)]
			res := prepare(t, p, &next, now, ks, fields)
			ups := make([]metadata.RowUpdate, len(ks))
			for i, k := range ks {
				f := map[string]metadata.FieldInfo{}
				for name, g := range res[i].Gens {
					f[name] = metadata.FieldInfo{Gen: g}
				}
				ups[i] = metadata.RowUpdate{Key: k, Index: res[i].Index, Fields: f}
				if rng.IntN(2) == 0 {
					ups[i].Tag = map[string]any{"uid": int64(rng.IntN(4)), "v": int64(rng.IntN(6))}
				}
			}
			if _, err := p.Commit(now, ups); err != nil {
				t.Fatal(err)
			}
			what = fmt.Sprintf("put %v %v", ks, fields)
		case 3: // delete
			ks := pickKeys()
			p.Delete(now, ks)
			what = fmt.Sprintf("delete %v", ks)
		case 4, 5, 6: // claim
			name := names[rng.IntN(len(names))]
			tok++
			token := fmt.Sprint("t", tok)
			n := 1 + rng.IntN(5)
			c := p.Claim(now, &ClaimArgs{Task: name, Token: token, Lease: time.Second, Rows: n, Min: 1 + rng.IntN(n),
				MaxDeliveries: rng.IntN(3), Select: sels[name], Floor: float64(rng.IntN(5))})
			if c.Lease != "" {
				leases[name] = append(leases[name], c.Lease)
			}
			what = fmt.Sprintf("claim %s %d: %d rows", name, n, len(c.Rows))
		case 7: // settle some of a lease
			name := names[rng.IntN(len(names))]
			if len(leases[name]) == 0 {
				continue
			}
			token := leases[name][rng.IntN(len(leases[name]))]
			var idx []uint64
			for i := range p.byIndex {
				if rng.IntN(2) == 0 {
					idx = append(idx, i)
				}
			}
			slices.Sort(idx)
			op := []metadata.SettleOp{metadata.Ack, metadata.Nack, metadata.Extend}[rng.IntN(3)]
			p.Settle(now, &SettleArgs{Task: name, Op: op, Lease: token, Indexes: idx, Delay: time.Duration(rng.IntN(2)) * time.Second})
			what = fmt.Sprintf("settle %s %v %v", name, op, idx)
		case 8: // retry or drop
			name := names[rng.IntN(len(names))]
			var idx []uint64
			for i := range p.byIndex {
				if rng.IntN(3) == 0 {
					idx = append(idx, i)
				}
			}
			op := []metadata.SettleOp{metadata.Retry, metadata.Drop}[rng.IntN(2)]
			p.Settle(now, &SettleArgs{Task: name, Op: op, Indexes: idx})
			what = fmt.Sprintf("%v %s %v", op, name, idx)
		case 9: // reset
			name := names[rng.IntN(len(names))]
			var idx []uint64
			if rng.IntN(2) == 0 {
				for i := range p.byIndex {
					if rng.IntN(2) == 0 {
						idx = append(idx, i)
					}
				}
				if idx == nil {
					idx = []uint64{}
				}
			}
			p.Reset(now, name, idx)
			what = fmt.Sprintf("reset %s %v", name, idx)
		case 10: // clear fields
			ks := pickKeys()
			fields := [][]string{{"a"}, {"b"}, {"a", "b"}}[rng.IntN(3)]
			p.DeleteFields(now, ks, fields)
			what = fmt.Sprintf("delete fields %v of %v", fields, ks)
		}
		checkIndex(t, p, fmt.Sprintf("step %d (%s)", step, what))
	}
}
