package rules

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
)

// Summary with Fields over sets of fields whose setHash collide ({a, l}
// and {b, c}, {a, l, x} and {b, c, x}), so that sets share a hash chain,
// one is dropped (the chain's head or not) and comes back: over random
// histories of puts (new rows, fields added, a commit changing only dtypes,
// a tag-only commit), field deletions down to none, deletes, claims by
// each task's fields (a group task too), settles, resets and snapshots,
// records applied or replayed, looks at times before earlier ones.
func TestSummaryFieldsCollidingSets(t *testing.T) {
	sets := [][]string{{"a", "l"}, {"b", "c"}, {"a", "l", "x"}, {"b", "c", "x"}, {"a"}, {"x"}}
	if setHash(fieldMap("a", "l")) != setHash(fieldMap("b", "c")) ||
		setHash(fieldMap("a", "l", "x")) != setHash(fieldMap("b", "c", "x")) {
		t.Fatal("the sets no longer collide: pick others")
	}
	taskFields := map[string][]string{"t": {"a", "l"}, "u": {"b", "c"}, "w": {"x"}, "v": nil, "g": {"b", "c"}}
	tasks := []string{"g", "t", "u", "v", "w"}
	const seeds, steps = 60, 160
	sec := int64(time.Second / time.Microsecond)
	seen := map[string]int{}
	for seed := range uint64(seeds) {
		rng := rand.New(rand.NewPCG(seed, 29))
		l := &logged{p: New()}
		now := int64(1)
		var keys []string
		leases := map[string][]uint64{}
		var stash [][]byte
		for step := range steps {
			if rng.IntN(3) == 0 {
				now += int64(1+rng.IntN(3)) * sec / 2
			}
			when := fmt.Sprintf("seed %d step %d", seed, step)
			apply := func(data []byte) Result {
				t.Helper()
				if rng.IntN(3) == 0 {
					l.n++
					l.p.Replay(&backends.Entry{N: l.n, ID: l.n, Time: now, Base: 100 * l.n, Data: data})
					l.p.TakeFulfilled()
					return Result{}
				}
				r, _ := l.at(t, now, data)
				return r
			}
			switch op := rng.IntN(20); {
			case op <= 4: // put rows with a set of fields; a commit of dtypes only; a tag-only commit
				ks := randomKeys(rng, &keys)
				fields := sets[rng.IntN(len(sets))]
				r, _ := l.at(t, now, PrepareRecord(ks, fields, nil, len(ks)))
				if r.Err != nil {
					t.Fatal(r.Err)
				}
				dtype := []string{"float32", "int64"}[rng.IntN(2)]
				tagOnly := rng.IntN(6) == 0
				// (The record shares one map among rows of equal cells.)
				ups := make([]metadata.RowUpdate, len(ks))
				for i, k := range ks {
					fs := map[string]metadata.FieldInfo{}
					for _, f := range fields {
						fs[f] = metadata.FieldInfo{DType: dtype, Gen: r.Reservations[i].Gens[f]}
					}
					ups[i] = metadata.RowUpdate{Key: k, Index: r.Reservations[i].Index, Fields: fs, Tag: map[string]any{"v": int64(rng.IntN(4))}}
					if tagOnly {
						ups[i].Fields = nil
					}
				}
				rec, err := CommitRecord(ups)
				if err != nil {
					t.Fatal(err)
				}
				if rng.IntN(5) == 0 {
					stash = append(stash, rec)
					break
				}
				if r := apply(rec); r.Err != nil {
					t.Fatal(r.Err)
				}
			case op == 5 && len(stash) > 0:
				k := rng.IntN(len(stash))
				if r := apply(stash[k]); r.Err != nil && !errors.Is(r.Err, backends.ErrConflict) {
					t.Fatal(r.Err)
				}
				stash = slices.Delete(stash, k, k+1)
			case op <= 9: // claim by the task's fields
				task := tasks[rng.IntN(len(tasks))]
				tok := fmt.Sprintf("%s-%d", task, step)
				a := &ClaimArgs{Task: task, Token: tok, Lease: time.Duration(1+rng.IntN(3)) * time.Second,
					Rows: 1 + rng.IntN(4), Min: 1, MaxDeliveries: rng.IntN(3), Select: Select{Fields: taskFields[task]}}
				if task == "g" {
					a.Select.Group = Group{Sep: "/", Size: 2}
					a.Rows = 2
				}
				r, _ := l.at(t, now, ClaimRecord(a))
				if r.Err != nil {
					t.Fatal(r.Err)
				}
				for _, row := range r.Claimed.Rows {
					leases[tok] = append(leases[tok], row.Index)
				}
			case op <= 12: // settle a lease
				for tok, idx := range leases {
					args := randomSettle(rng, tok, idx, step, metadata.Ack, metadata.Nack, metadata.Drop, metadata.Extend, metadata.Undo)
					if r := apply(SettleRecord(args)); r.Err != nil {
						t.Fatal(r.Err)
					}
					if args.Op != metadata.Extend {
						delete(leases, tok)
					}
					break
				}
			case op == 13 && len(keys) > 0:
				if r := apply(SettleRecord(randomRetryDrop(rng, tasks, l.p))); r.Err != nil {
					t.Fatal(r.Err)
				}
			case op <= 15 && len(keys) > 0: // delete rows, or fields of rows (maybe every one)
				var ks []string
				for range 1 + rng.IntN(4) {
					ks = append(ks, keys[rng.IntN(len(keys))])
				}
				rec := DeleteRecord(ks[:1+rng.IntN(len(ks))])
				if rng.IntN(3) != 0 {
					fs := [][]string{{"a"}, {"l"}, {"b"}, {"c"}, {"x"}, {"a", "l"}, {"b", "c"}, {"a", "b", "c", "l", "x"}}[rng.IntN(8)]
					rec = DeleteFieldsRecord(ks, fs)
				}
				if r := apply(rec); r.Err != nil {
					t.Fatal(r.Err)
				}
			case op == 16:
				if r := apply(randomResetRecord(rng, l.p, tasks)); r.Err != nil {
					t.Fatal(r.Err)
				}
			case op == 17:
				l.p = roundTrip(t, l.p)
			case op == 18 && rng.IntN(3) == 0:
				rec := CapacityRecord(metadata.Capacity{ClearAcked: []string{"t"}})
				if rng.IntN(4) == 0 {
					rec = DeletePartitionRecord()
				}
				if r := apply(rec); r.Err != nil {
					t.Fatal(r.Err)
				}
			}
			for range 2 {
				at := now + int64(rng.IntN(5)-1)*sec/2 // maybe before the last look
				for _, name := range tasks {
					req := metadata.SummaryRequest{Tasks: []string{name}, Fields: taskFields[name], Counts: true}
					s := checkSummary(t, l.p, at, req, when)
					ts := s.Tasks[name]
					for what, ok := range map[string]bool{"ready": ts.Ready > 0, "waiting": ts.Waiting > 0, "leased": ts.Leased > 0,
						"acked": ts.Acked > 0, "dead": ts.Dead > 0, "dropped": ts.Dropped > 0} {
						if ok && len(req.Fields) > 0 {
							seen[what]++
						}
					}
				}
				fs := [][]string{{"a", "l"}, {"b", "c"}, {"c", "b", "x"}, nil}[rng.IntN(4)]
				checkSummary(t, l.p, at, metadata.SummaryRequest{Fields: fs, Counts: true}, when)
			}
			if l.p.sum != nil {
				n := 0
				for fs := range l.p.sum.all() {
					n++
					if fs.rows <= 0 {
						t.Fatalf("%s: set %v kept with %d rows", when, fs.names, fs.rows)
					}
				}
				if n > 1 && l.p.sum.sets[setHash(fieldMap("a", "l"))] != nil && l.p.sum.sets[setHash(fieldMap("a", "l"))].next != nil {
					seen["chain"]++
				}
			}
		}
	}
	for _, what := range []string{"ready", "waiting", "leased", "acked", "dead", "dropped", "chain"} {
		if seen[what] == 0 {
			t.Errorf("no history reached %s", what)
		}
	}
	t.Logf("reached: %v", seen)
}

func fieldMap(names ...string) map[string]metadata.FieldInfo {
	m := map[string]metadata.FieldInfo{}
	for _, f := range names {
		m[f] = metadata.FieldInfo{}
	}
	return m
}

// randomKeys picks one to four keys of p0..2/k0..19, adding new ones to
// keys.
func randomKeys(rng *rand.Rand, keys *[]string) []string {
	var ks []string
	for range 1 + rng.IntN(4) {
		k := fmt.Sprintf("p%d/k%d", rng.IntN(3), rng.IntN(20))
		if !slices.Contains(ks, k) {
			ks = append(ks, k)
		}
	}
	for _, k := range ks {
		if !slices.Contains(*keys, k) {
			*keys = append(*keys, k)
		}
	}
	return ks
}
