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

// fieldTasks are the tasks of TestSummaryFieldsMatchesView and the fields
// each claims by (a status of the task names them).
var fieldTasks = map[string][]string{"t": {"a"}, "u": {"a", "b"}, "w": {"c"}, "v": nil}

// Summary with Fields (what a task's status and a stalled Wait's look
// send) is what the View's Summary computes from every row and every
// task's consumption, as the replica's slow path builds that View
// (viewOf), over random histories: puts of rows with varying sets of
// fields (new rows, and fields added to rows), fields deleted, rows
// deleted (and cleared by the capacity), claims by each task's fields
// into death by their deliveries, acks, nacks with delays, extends,
// drops, retries, undone claims, leases ending as the clock moves, resets
// of tasks and rows, every row deleted; asked with each task's fields,
// with fields no row has, and with none, after every step from a first
// one early or late (the index built after many changes), and of a
// partition restored from its snapshot (Freeze, Encode, Restore), which
// must answer as the one it was taken of.
func TestSummaryFieldsMatchesView(t *testing.T) {
	const seeds, steps = 120, 160
	sec := int64(time.Second / time.Microsecond)
	seen := map[string]int{}
	tasks := slices.Sorted(func(yield func(string) bool) {
		for name := range fieldTasks {
			if !yield(name) {
				return
			}
		}
	})
	for seed := range uint64(seeds) {
		rng := rand.New(rand.NewPCG(seed, 13))
		l := &logged{p: New()}
		now := int64(1)
		var keys []string
		from := rng.IntN(steps / 4) // the first step Summary is asked at
		if seed%3 == 0 {
			from = steps - 1 - rng.IntN(steps/8) // late: after many changes
		}
		leases := map[string][]uint64{}
		var stash [][]byte
		for step := range steps {
			if rng.IntN(3) == 0 { // else rows are committed at the time of the last look
				now += int64(1+rng.IntN(3)) * sec / 2
			}
			when := fmt.Sprintf("seed %d step %d", seed, step)
			apply := func(data []byte) Result {
				t.Helper()
				r, _ := l.at(t, now, data)
				return r
			}
			switch op := rng.IntN(20); {
			case op <= 3: // put rows, new or again, with a set of fields
				var rec []byte
				rec, keys = randomFieldsPut(t, rng, l, now, keys, 24)
				if rng.IntN(4) == 0 {
					stash = append(stash, rec)
					break
				}
				if r := apply(rec); r.Err != nil {
					t.Fatal(r.Err)
				}
			case op == 4 && len(stash) > 0: // commit rows prepared before others
				k := rng.IntN(len(stash))
				if r := apply(stash[k]); r.Err != nil && !errors.Is(r.Err, backends.ErrConflict) {
					t.Fatal(r.Err)
				}
				stash = slices.Delete(stash, k, k+1)
			case op <= 8: // claim by the task's fields
				task := tasks[rng.IntN(len(tasks))]
				tok := fmt.Sprintf("%s-%d", task, step)
				a := &ClaimArgs{Task: task, Token: tok, Lease: time.Duration(1+rng.IntN(3)) * time.Second,
					Rows: 1 + rng.IntN(4), Min: 1, MaxDeliveries: rng.IntN(3), Select: Select{Fields: fieldTasks[task]}}
				r := apply(ClaimRecord(a))
				if r.Err != nil {
					t.Fatal(r.Err)
				}
				for _, row := range r.Claimed.Rows {
					leases[tok] = append(leases[tok], row.Index)
				}
			case op <= 11: // settle a lease
				for tok, idx := range leases {
					args := randomSettle(rng, tok, idx, step, metadata.Ack, metadata.Ack, metadata.Nack, metadata.Nack, metadata.Drop, metadata.Extend, metadata.Undo)
					if r := apply(SettleRecord(args)); r.Err != nil {
						t.Fatal(r.Err)
					}
					if args.Op != metadata.Extend {
						delete(leases, tok)
					}
					break
				}
			case op == 12 && len(keys) > 0: // retry or drop rows of a task
				if r := apply(SettleRecord(randomRetryDrop(rng, tasks, l.p))); r.Err != nil {
					t.Fatal(r.Err)
				}
			case op <= 14 && len(keys) > 0: // delete a row, or fields of rows
				var ks []string
				for range 1 + rng.IntN(3) {
					ks = append(ks, keys[rng.IntN(len(keys))])
				}
				rec := DeleteRecord(ks[:1])
				if rng.IntN(3) != 0 {
					fs := [][]string{{"a"}, {"b"}, {"c"}, {"a", "b"}, {"a", "b", "c"}}[rng.IntN(5)]
					rec = DeleteFieldsRecord(ks, fs)
				}
				if r := apply(rec); r.Err != nil {
					t.Fatal(r.Err)
				}
			case op == 15: // reset a task, or some of its rows
				if r := apply(randomResetRecord(rng, l.p, tasks)); r.Err != nil {
					t.Fatal(r.Err)
				}
			case op == 16: // a snapshot restored, compared first
				restored := roundTrip(t, l.p)
				if step >= from {
					for _, req := range fieldRequests(rng) {
						at := now + int64(rng.IntN(4))*sec/2
						want := checkSummary(t, l.p, at, req, when+" before its snapshot")
						if got := restored.Summary(at, req); !reflect.DeepEqual(got, want) {
							t.Fatalf("%s: restored from a snapshot, Summary(%v, %v) =\n%+v\nbefore\n%+v", when, req.Tasks, req.Fields, got, want)
						}
					}
				}
				l.p = restored
			case op == 17 && rng.IntN(3) == 0: // clear what t consumed, or delete every row
				rec := CapacityRecord(metadata.Capacity{ClearAcked: []string{"t"}})
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
			for _, req := range fieldRequests(rng) {
				at := now + int64(rng.IntN(4))*sec/2
				want := checkSummary(t, l.p, at, req, when)
				noteFieldSummary(seen, req, want)
			}
		}
	}
	for _, what := range []string{"waiting", "ready", "leased", "acked", "dropped", "dead", "redelivered",
		"oldest ready later than without fields", "ready but none waiting", "no field named", "task with no state waiting"} {
		if seen[what] == 0 {
			t.Errorf("no history reached a summary with fields with %s", what)
		}
	}
	t.Logf("reached: %v", seen)
}

// fieldRequests are the Summaries TestSummaryFieldsMatchesView asks after
// a step: each task's status (its fields), one of several tasks by fields
// picked by rng (none, ones no row has, one named twice), one of every
// task, and one of a task with no state.
func fieldRequests(rng *rand.Rand) []metadata.SummaryRequest {
	var reqs []metadata.SummaryRequest
	for name, fs := range fieldTasks {
		reqs = append(reqs, metadata.SummaryRequest{Tasks: []string{name}, Fields: fs, Counts: true})
	}
	some := [][]string{nil, {"b"}, {"c", "a"}, {"z"}, {"a", "a"}, {"a", "b", "c"}}
	reqs = append(reqs,
		metadata.SummaryRequest{Tasks: []string{"t", "u", "x"}, Fields: some[rng.IntN(len(some))], Counts: true, Version: "v"},
		metadata.SummaryRequest{Fields: some[rng.IntN(len(some))], Counts: true},
		metadata.SummaryRequest{Tasks: []string{"x"}, Fields: some[rng.IntN(len(some))], Counts: true})
	return reqs
}

// noteFieldSummary counts in seen what a Summary with fields reached.
func noteFieldSummary(seen map[string]int, req metadata.SummaryRequest, s metadata.Summary) {
	if len(req.Fields) == 0 {
		return
	}
	for name, ts := range s.Tasks {
		for what, ok := range map[string]bool{"waiting": ts.Waiting > 0, "ready": ts.Ready > 0, "leased": ts.Leased > 0,
			"acked": ts.Acked > 0, "dropped": ts.Dropped > 0, "dead": ts.Dead > 0, "redelivered": ts.Redelivered > 0,
			"oldest ready later than without fields": !ts.OldestReady.IsZero() && ts.OldestReady.After(s.OldestRow),
			"ready but none waiting":                 ts.Ready > 0 && ts.Waiting == 0,
			"no field named":                         slices.Contains(req.Fields, "z") && ts.Waiting > 0,
			"task with no state waiting":             name == "x" && ts.Waiting > 0 && ts.Ready > 0} {
			if ok {
				seen[what]++
			}
		}
	}
}

// roundTrip returns p restored from its snapshot (Freeze, Encode,
// Restore).
func roundTrip(t *testing.T, p *Partition) *Partition {
	t.Helper()
	b, err := p.Freeze().Encode()
	if err != nil {
		t.Fatal(err)
	}
	q, err := Restore(b)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// randomFieldsPut is randomPutOf of one to four rows with a set of
// fields of a, b and c (one of them or more).
func randomFieldsPut(t *testing.T, rng *rand.Rand, l *logged, now int64, keys []string, nkeys int) ([]byte, []string) {
	t.Helper()
	return randomPutOf(t, rng, l, now, keys, nkeys, 4,
		[][]string{{"a"}, {"b"}, {"c"}, {"a", "b"}, {"a", "c"}, {"b", "c"}, {"a", "b", "c"}})
}
