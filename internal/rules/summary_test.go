package rules

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
)

// viewOf is the View of tasks (every task when none) of p as of at, in
// the partition's time, as a store builds it.
func viewOf(p *Partition, at int64, tasks []string) metadata.View {
	rows := p.List()
	v := metadata.View{Rows: rows, Tasks: p.Consumption(at, tasks...), Since: p.Since(rows),
		Mark: metadata.Mark{Seq: p.Seq(), Consumed: p.Consumed()}, Groups: p.GroupWaits(at, tasks...)}
	v.Inserted, v.Consumed = p.Counts(tasks...)
	v.Capacity, v.Used = p.Capacity()
	return v
}

// Summary, from the counts and indexes commits, deletes and every change
// of an entry keep, is what the View's Summary computes from every row
// and every task's consumption, over random histories: commits adding
// fields, fields deleted, rows deleted (and cleared by the capacity),
// resets of tasks and rows, claims (groups too) into death by their
// deliveries, acks, nacks with delays and reasons, extends, drops, retries,
// undone claims, leases ending as the clock moves, and snapshots restored;
// asked of several task sets after every step, the indexes built early
// or late.
func TestSummaryMatchesView(t *testing.T) {
	const seeds, steps = 150, 80
	sec := int64(time.Second / time.Microsecond)
	seen := map[string]int{} // what the histories reached, compared
	for seed := range uint64(seeds) {
		rng := rand.New(rand.NewPCG(seed, 11))
		l := &logged{p: New()}
		now := int64(1)
		keys := []string{}
		tasks := []string{"t", "u", "g"}
		from := rng.IntN(steps / 2) // the first step Summary is asked at
		leases := map[string][]uint64{}
		var stash [][]byte // commits of rows prepared before, to come later
		for step := range steps {
			now += int64(rng.IntN(4)) * sec / 2
			switch op := rng.IntN(16); {
			case op <= 2: // put rows, new or again, one or two fields
				var rec []byte
				rec, keys = randomPut(t, rng, l, now, keys, 14)
				if rng.IntN(3) == 0 {
					stash = append(stash, rec)
					break
				}
				if r, _ := l.at(t, now, rec); r.Err != nil {
					t.Fatal(r.Err)
				}
			case op == 3 && len(stash) > 0: // commit rows prepared before others
				k := rng.IntN(len(stash))
				if r, _ := l.at(t, now, stash[k]); r.Err != nil && !errors.Is(r.Err, backends.ErrConflict) {
					t.Fatal(r.Err) // (refused as a conflict if the row went since)
				}
				stash = slices.Delete(stash, k, k+1)
			case op <= 5: // claim
				task := tasks[rng.IntN(len(tasks))]
				tok := fmt.Sprintf("%s-%d", task, step)
				a := &ClaimArgs{Task: task, Token: tok, Lease: time.Duration(1+rng.IntN(3)) * time.Second,
					Rows: 1 + rng.IntN(3), Min: 1, MaxDeliveries: rng.IntN(3)}
				if task == "g" {
					a.Select = Select{Group: Group{Sep: "/", Size: 2}}
					a.Rows = 2
				} else if rng.IntN(2) == 0 {
					a.Select = Select{Fields: []string{"f"}}
				}
				r, _ := l.at(t, now, ClaimRecord(a))
				if r.Err != nil {
					t.Fatal(r.Err)
				}
				for _, row := range r.Claimed.Rows {
					leases[tok] = append(leases[tok], row.Index)
				}
			case op <= 8: // settle a lease
				for tok, idx := range leases {
					args := randomSettle(rng, tok, idx, step, metadata.Ack, metadata.Nack, metadata.Nack, metadata.Drop, metadata.Extend, metadata.Undo)
					if r, _ := l.at(t, now, SettleRecord(args)); r.Err != nil {
						t.Fatal(r.Err)
					}
					if args.Op != metadata.Extend {
						delete(leases, tok)
					}
					break
				}
			case op == 9 && len(keys) > 0: // retry or drop rows of a task (dead ones, ready ones)
				if r, _ := l.at(t, now, SettleRecord(randomRetryDrop(rng, tasks, l.p))); r.Err != nil {
					t.Fatal(r.Err)
				}
			case op == 10 && len(keys) > 0: // delete a row, or a field of rows
				k := keys[rng.IntN(len(keys))]
				rec := DeleteRecord([]string{k})
				if rng.IntN(2) == 0 {
					rec = DeleteFieldsRecord([]string{k, keys[rng.IntN(len(keys))]}, []string{[]string{"f", "g"}[rng.IntN(2)]})
				}
				if r, _ := l.at(t, now, rec); r.Err != nil {
					t.Fatal(r.Err)
				}
			case op == 11: // reset a task, or some of its rows
				var idx []uint64
				if rng.IntN(2) == 0 {
					for _, row := range l.p.List() {
						if rng.IntN(2) == 0 {
							idx = append(idx, row.Index)
						}
					}
				}
				if r, _ := l.at(t, now, ResetRecord(tasks[rng.IntN(len(tasks))], idx)); r.Err != nil {
					t.Fatal(r.Err)
				}
			case op == 12: // a snapshot restored
				snap, err := l.p.Snapshot()
				if err != nil {
					t.Fatal(err)
				}
				if l.p, err = Restore(snap); err != nil {
					t.Fatal(err)
				}
			case op == 13 && rng.IntN(4) == 0: // clear what t consumed, or delete every row
				rec := CapacityRecord(metadata.Capacity{ClearAcked: []string{"t"}})
				if rng.IntN(3) == 0 {
					rec = DeletePartitionRecord()
				}
				if r, _ := l.at(t, now, rec); r.Err != nil {
					t.Fatal(r.Err)
				}
			}
			if step < from {
				continue
			}
			for _, ts := range [][]string{nil, {"t"}, {"u", "g", "x"}} {
				at := now + int64(rng.IntN(4))*sec/2
				req := metadata.SummaryRequest{Tasks: ts, Counts: true}
				if ts != nil && rng.IntN(3) == 0 {
					req.Version = "v"
				}
				want := checkSummary(t, l.p, at, req, fmt.Sprintf("seed %d step %d", seed, step))
				for _, s := range want.Tasks {
					for what, ok := range map[string]bool{"leased": s.Leased > 0, "acked": s.Acked > 0, "dropped": s.Dropped > 0,
						"dead": s.Dead > 0, "dead of a lease": s.DeadLeaseEnded > 0, "dead of a nack": s.Dead > s.DeadLeaseEnded,
						"last dead with a reason": s.LastDead != nil && s.LastDead.Reason != "", "redelivered": s.Redelivered > 0,
						"leases": len(s.Leases) > 1, "groups": len(s.Groups) > 0, "consumed": s.Consumed > 0,
						"oldest ready later": !s.OldestReady.IsZero() && s.OldestReady.After(want.OldestRow)} {
						if ok {
							seen[what]++
						}
					}
				}
			}
		}
	}
	for _, what := range []string{"leased", "acked", "dropped", "dead", "dead of a lease", "dead of a nack",
		"last dead with a reason", "redelivered", "leases", "groups", "consumed", "oldest ready later"} {
		if seen[what] == 0 {
			t.Errorf("no history reached a summary with %s", what)
		}
	}
	t.Logf("reached: %v", seen)
}

// checkSummary fails t unless p's Summary of req at at is the View's, and
// returns it.
func checkSummary(t *testing.T, p *Partition, at int64, req metadata.SummaryRequest, when string) metadata.Summary {
	t.Helper()
	v := viewOf(p, at, req.Tasks)
	want := v.Summary(req)
	if got := p.Summary(at, req); !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: Summary(%v) =\n%+v\nthe View's Summary\n%+v", when, req.Tasks, got, want)
	}
	return want
}

// A row prepared before rows committed at the same time, committed after
// a look passed over some of them, is ready: the next look finds it, the
// rows it passed over not ready since; with the task's fields named or
// not.
func TestSummaryRowCommittedLate(t *testing.T) {
	l := &logged{p: New()}
	const now = 1_000_000
	r, _ := l.at(t, now, PrepareRecord([]string{"a", "b", "d"}, []string{"f"}, nil, 3))
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	commit := func(j int, key string) {
		t.Helper()
		rec, err := CommitRecord([]metadata.RowUpdate{{Key: key, Index: r.Reservations[j].Index,
			Fields: map[string]metadata.FieldInfo{"f": {Gen: r.Reservations[j].Gens["f"]}}}})
		if err != nil {
			t.Fatal(err)
		}
		if r, _ := l.at(t, now, rec); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	commit(1, "b")
	commit(2, "d")
	c, _ := l.at(t, now, ClaimRecord(&ClaimArgs{Task: "t", Token: "tok", Lease: time.Hour, Rows: 1, Min: 1}))
	if c.Err != nil || len(c.Claimed.Rows) != 1 {
		t.Fatalf("claim: %+v", c)
	}
	req := metadata.SummaryRequest{Tasks: []string{"t"}, Counts: true}
	byFields := metadata.SummaryRequest{Tasks: []string{"t"}, Fields: []string{"f"}, Counts: true}
	for _, req := range []metadata.SummaryRequest{req, byFields} {
		if s := checkSummary(t, l.p, now, req, "b leased").Tasks["t"]; s.Ready != 1 || s.OldestReady.IsZero() {
			t.Fatalf("b leased: %+v, want d ready", s)
		}
	}
	commit(0, "a")
	d := r.Reservations[2].Index
	if r, _ := l.at(t, now, SettleRecord(&SettleArgs{Task: "t", Op: metadata.Drop, Indexes: []uint64{d}})); r.Err != nil || len(r.Settled.Lost) > 0 {
		t.Fatalf("drop d: %+v", r)
	}
	for _, req := range []metadata.SummaryRequest{req, byFields} {
		if s := checkSummary(t, l.p, now, req, "a committed").Tasks["t"]; s.Ready != 1 || s.OldestReady.IsZero() {
			t.Fatalf("a committed: %+v, want it ready", s)
		}
	}
}

// CountsOnly accepts what Summary answers, and nothing else.
func TestCountsOnly(t *testing.T) {
	for _, c := range []struct {
		req  metadata.SummaryRequest
		want bool
	}{
		{metadata.SummaryRequest{Counts: true}, true},
		{metadata.SummaryRequest{Counts: true, Tasks: []string{"t"}, Version: "v"}, true},
		{metadata.SummaryRequest{}, false},
		{metadata.SummaryRequest{Counts: true, Fields: []string{"f"}}, true},
		{metadata.SummaryRequest{Counts: true, Tasks: []string{"t"}, Fields: []string{"f", "g"}, Version: "v"}, true},
		{metadata.SummaryRequest{Fields: []string{"f"}}, false},
		{metadata.SummaryRequest{Counts: true, Fields: []string{"f"}, Progress: true}, false},
		{metadata.SummaryRequest{Counts: true, Progress: true}, false},
	} {
		if got := CountsOnly(&c.req); got != c.want {
			t.Errorf("CountsOnly(%+v) = %v, want %v", c.req, got, c.want)
		}
	}
}

// BenchmarkSummary: a counts-only Summary of a GRPO-shaped partition (see
// heldRows), the first (which builds the index) and the next ones; and a
// task's status (its fields named: Task.Status) of a task that acked half
// the rows (reward) and of one holding a quarter under leases (train), by
// Summary and, for comparison, by what a store's slow path counts: the
// View (viewOf, its rows copied as metadata.SummaryHeld does) and its
// Summary.
func BenchmarkSummary(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		p := heldRows(b, n)
		req := metadata.SummaryRequest{Counts: true}
		b.Run(fmt.Sprintf("rows=%d/first", n), func(b *testing.B) {
			for b.Loop() {
				p.sum = nil
				for _, t := range p.tasks {
					t.cnt = nil
				}
				p.Summary(p.Now(), req)
			}
		})
		b.Run(fmt.Sprintf("rows=%d/next", n), func(b *testing.B) {
			for b.Loop() {
				p.Summary(p.Now(), req)
			}
		})
	}
	for _, n := range []int{1_000, 100_000} {
		p := heldRows(b, n)
		p.Summary(p.Now(), metadata.SummaryRequest{Counts: true})
		for _, task := range []string{"reward", "train"} {
			req := metadata.SummaryRequest{Tasks: []string{task}, Fields: []string{"rewards"}, Counts: true}
			b.Run(fmt.Sprintf("rows=%d/status/%s/summary", n, task), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					p.Summary(p.Now(), req)
				}
			})
			b.Run(fmt.Sprintf("rows=%d/status/%s/view", n, task), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					v := viewOf(p, p.Now(), req.Tasks)
					v.Rows = slices.Clone(v.Rows)
					v.Summary(req)
				}
			})
		}
	}
}

// randomPut is randomPutOf of one to three rows with one or two fields
// of f and g.
func randomPut(t *testing.T, rng *rand.Rand, l *logged, now int64, keys []string, nkeys int) ([]byte, []string) {
	t.Helper()
	return randomPutOf(t, rng, l, now, keys, nkeys, 3, [][]string{{"f"}, {"g"}, {"f", "g"}})
}

// randomResetRecord resets one of tasks: whole, or some of p's rows,
// picked by rng.
func randomResetRecord(rng *rand.Rand, p *Partition, tasks []string) []byte {
	var idx []uint64
	if rng.IntN(2) == 0 {
		for _, row := range p.List() {
			if rng.IntN(2) == 0 {
				idx = append(idx, row.Index)
			}
		}
	}
	return ResetRecord(tasks[rng.IntN(len(tasks))], idx)
}

// randomPutOf prepares one to maxRows rows of keys p0..2/k0..nkeys-1
// with one of sets as their fields in l's partition at now, and returns
// the record that commits them (a tag v each) and keys with theirs added.
func randomPutOf(t *testing.T, rng *rand.Rand, l *logged, now int64, keys []string, nkeys, maxRows int, sets [][]string) ([]byte, []string) {
	t.Helper()
	var ks []string
	for range 1 + rng.IntN(maxRows) {
		k := fmt.Sprintf("p%d/k%d", rng.IntN(3), rng.IntN(nkeys))
		if !slices.Contains(ks, k) {
			ks = append(ks, k)
		}
	}
	fields := sets[rng.IntN(len(sets))]
	r, _ := l.at(t, now, PrepareRecord(ks, fields, nil, len(ks)))
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	ups := make([]metadata.RowUpdate, len(ks))
	for i, k := range ks {
		fs := map[string]metadata.FieldInfo{}
		for _, f := range fields {
			fs[f] = metadata.FieldInfo{Gen: r.Reservations[i].Gens[f]}
		}
		ups[i] = metadata.RowUpdate{Key: k, Index: r.Reservations[i].Index, Fields: fs,
			Tag: map[string]any{"v": int64(rng.IntN(4))}}
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	rec, err := CommitRecord(ups)
	if err != nil {
		t.Fatal(err)
	}
	return rec, keys
}

// randomSettle is a settle of the lease tok (of task tok[:1], its rows
// idx) by one of ops, picked by rng, with the arguments that op takes.
func randomSettle(rng *rand.Rand, tok string, idx []uint64, step int, ops ...metadata.SettleOp) *SettleArgs {
	sop := ops[rng.IntN(len(ops))]
	args := &SettleArgs{Task: tok[:1], Op: sop, Lease: tok, Indexes: idx}
	switch sop {
	case metadata.Drop:
		args.Lease = ""
	case metadata.Nack:
		args.Delay = time.Duration(rng.IntN(3)) * time.Second / 2
		if rng.IntN(2) == 0 {
			args.Reason = fmt.Sprintf("boom %d", step)
		}
	case metadata.Extend:
		args.Delay = time.Duration(1+rng.IntN(3)) * time.Second
	case metadata.Undo, metadata.EndBatch:
		args.Indexes = nil
	case metadata.Unwait:
		if rng.IntN(2) == 0 {
			args.Indexes = nil
		}
	}
	return args
}

// randomRetryDrop is a Retry or a Drop, picked by rng, of one of tasks,
// on each row of p with a chance of one in three.
func randomRetryDrop(rng *rand.Rand, tasks []string, p *Partition) *SettleArgs {
	task := tasks[rng.IntN(len(tasks))]
	sop := []metadata.SettleOp{metadata.Retry, metadata.Drop}[rng.IntN(2)]
	var idx []uint64
	for _, row := range p.List() {
		if rng.IntN(3) == 0 {
			idx = append(idx, row.Index)
		}
	}
	return &SettleArgs{Task: task, Op: sop, Indexes: idx}
}
