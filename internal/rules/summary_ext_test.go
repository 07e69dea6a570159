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

// TestSummaryMatchesViewExt: TestSummaryMatchesView's histories with custom
// claims (drops), stale claims (park, drop), rank batches, standing claims
// (served, replaced, unwaited), end-batch, replays, capacity clears on ack,
// and looks at times before earlier looks; asked with fields too.
func TestSummaryMatchesViewExt(t *testing.T) {
	seeds := uint64(80) // 300 and 250 steps, and 400 of 120, passed when it was written
	const steps = 250
	sec := int64(time.Second / time.Microsecond)
	seen := map[string]int{}
	defer func() { t.Logf("%v", seen) }()
	for seed := range seeds {
		rng := rand.New(rand.NewPCG(seed, 12))
		l := &logged{p: New()}
		now := int64(1)
		keys := []string{}
		tasks := []string{"t", "u", "g", "c", "s", "b", "h"}
		from := rng.IntN(steps / 2)
		leases := map[string][]uint64{}
		var holds []string
		var stash [][]byte
		replay := rng.IntN(2) == 0
		apply := func(data []byte) Result {
			t.Helper()
			if replay && rng.IntN(2) == 0 {
				l.n++
				l.p.Replay(&backends.Entry{N: l.n, ID: l.n, Time: now, Base: 100 * l.n, Data: data})
				for _, c := range l.p.TakeFulfilled() {
					for _, row := range c.Rows {
						leases[c.Waiting] = append(leases[c.Waiting], row.Index)
					}
				}
				return Result{}
			}
			r, fs := l.at(t, now, data)
			for _, c := range fs {
				for _, row := range c.Rows {
					leases[c.Waiting] = append(leases[c.Waiting], row.Index)
				}
			}
			return r
		}
		for step := range steps {
			now += int64(rng.IntN(4)) * sec / 2
			switch op := rng.IntN(20); {
			case op <= 2:
				var rec []byte
				rec, keys = randomPut(t, rng, l, now, keys, 40)
				if rng.IntN(3) == 0 {
					stash = append(stash, rec)
					break
				}
				if r := apply(rec); r.Err != nil {
					t.Fatal(r.Err)
				}
			case op == 3 && len(stash) > 0:
				k := rng.IntN(len(stash))
				if r := apply(stash[k]); r.Err != nil && !errors.Is(r.Err, backends.ErrConflict) {
					t.Fatal(r.Err)
				}
				stash = slices.Delete(stash, k, k+1)
			case op <= 7:
				task := tasks[rng.IntN(len(tasks))]
				tok := fmt.Sprintf("%s-%d", task, step)
				a := &ClaimArgs{Task: task, Token: tok, Lease: time.Duration(1+rng.IntN(3)) * time.Second,
					Rows: 1 + rng.IntN(3), Min: 1, MaxDeliveries: rng.IntN(3)}
				switch task {
				case "g":
					a.Select = Select{Group: Group{Sep: "/", Size: 2}}
					a.Rows = 2
				case "c":
					rows, _ := l.p.Candidates(now, task, Select{}, 0, 6)
					a.Custom = true
					for _, r := range rows {
						switch rng.IntN(3) {
						case 0:
							a.Units = append(a.Units, []uint64{r.Index})
						case 1:
							a.Drop = append(a.Drop, r.Index)
						}
					}
				case "s":
					a.Select = Select{Stale: Stale{Tag: "v", Drop: rng.IntN(2) == 0}}
					a.Floor = float64(rng.IntN(4))
				case "b":
					a.Batch = &metadata.Batch{Ranks: 2, Rank: rng.IntN(2)}
				case "h":
					a.Min, a.Rows = 3, 3
					a.Hold = time.Duration(1+rng.IntN(3)) * time.Second
					if len(holds) > 0 && rng.IntN(2) == 0 {
						a.Replaces = holds[rng.IntN(len(holds))]
					}
				default:
					if rng.IntN(2) == 0 {
						a.Select = Select{Fields: []string{"f"}}
					}
				}
				r := apply(ClaimRecord(a))
				if r.Err != nil {
					t.Fatal(r.Err)
				}
				if task == "h" {
					holds = append(holds, tok)
				}
				for _, row := range r.Claimed.Rows {
					leases[tok] = append(leases[tok], row.Index)
				}
				if task == "b" && r.Err == nil {
					leases[tok] = append(leases[tok], l.p.LeasedTo(task, tok)...)
				}
			case op <= 10:
				for tok, idx := range leases {
					args := randomSettle(rng, tok, idx, step, metadata.Ack, metadata.Nack, metadata.Nack, metadata.Drop, metadata.Extend, metadata.Undo, metadata.Unwait, metadata.EndBatch)
					if r := apply(SettleRecord(args)); r.Err != nil {
						t.Fatal(r.Err)
					}
					if args.Op != metadata.Extend && args.Op != metadata.EndBatch {
						delete(leases, tok)
					}
					break
				}
			case op == 11 && len(holds) > 0:
				tok := holds[rng.IntN(len(holds))]
				if r := apply(SettleRecord(&SettleArgs{Task: "h", Op: metadata.Unwait, Lease: tok})); r.Err != nil {
					t.Fatal(r.Err)
				}
			case op == 12 && len(keys) > 0:
				if r := apply(SettleRecord(randomRetryDrop(rng, tasks, l.p))); r.Err != nil {
					t.Fatal(r.Err)
				}
			case op == 13 && len(keys) > 0:
				k := keys[rng.IntN(len(keys))]
				rec := DeleteRecord([]string{k})
				if rng.IntN(2) == 0 {
					rec = DeleteFieldsRecord([]string{k, keys[rng.IntN(len(keys))]}, []string{[]string{"f", "g"}[rng.IntN(2)]})
				}
				if r := apply(rec); r.Err != nil {
					t.Fatal(r.Err)
				}
			case op == 14:
				if r := apply(randomResetRecord(rng, l.p, tasks)); r.Err != nil {
					t.Fatal(r.Err)
				}
			case op == 15 && rng.IntN(3) == 0:
				snap, err := l.p.Snapshot()
				if err != nil {
					t.Fatal(err)
				}
				if l.p, err = Restore(snap); err != nil {
					t.Fatal(err)
				}
			case op == 16 && rng.IntN(3) == 0:
				c := metadata.Capacity{ClearAcked: []string{"t"}}
				if rng.IntN(2) == 0 {
					c.ClearAcked = []string{"t", "c"}
				}
				rec := CapacityRecord(c)
				if rng.IntN(4) == 0 {
					rec = DeletePartitionRecord()
				}
				if r := apply(rec); r.Err != nil {
					t.Fatal(r.Err)
				}
			}
			if step < from {
				continue
			}
			for _, ts := range [][]string{nil, {"t"}, {"u", "g", "x"}, {"c", "s"}, {"b", "h"}} {
				at := now + int64(rng.IntN(7)-2)*sec/2
				req := metadata.SummaryRequest{Tasks: ts, Counts: true}
				if ts != nil && rng.IntN(3) == 0 {
					req.Version = "v"
				}
				w := checkSummary(t, l.p, at, req, fmt.Sprintf("seed %d step %d", seed, step))
				if rng.IntN(2) == 0 { // a status by fields
					req.Fields = [][]string{{"f"}, {"g"}, {"g", "f"}}[rng.IntN(3)]
					checkSummary(t, l.p, at, req, fmt.Sprintf("seed %d step %d, fields %v", seed, step, req.Fields))
				}
				for name, s := range w.Tasks {
					if s.Leased > 0 {
						seen[name+" leased"]++
					}
					if s.Dropped > 0 {
						seen[name+" dropped"]++
					}
					if s.Dead > 0 {
						seen[name+" dead"]++
					}
					if s.Acked > 0 {
						seen[name+" acked"]++
					}
					if !s.OldestReady.IsZero() && s.OldestReady.After(w.OldestRow) {
						seen[name+" oldest later"]++
					}
				}
			}
		}
	}
}
