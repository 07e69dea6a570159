package rules

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends/metadata"
)

// Oldest, from its index kept by commits and deletes, is what the View's
// Summary computes from every row and every task's consumption, over
// random histories: commits of numeric, non-numeric and missing tags,
// tags changed by later commits, claims, acks, nacks into death, drops,
// resets, deletes and leases ending; asked of several tags and task sets
// at random moments (so that indexes are built early and late).
func TestOldestMatchesView(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 7))
		l := &logged{p: New()}
		now := int64(1)
		keys := []string{}
		tasks := []string{"t", "u"}
		tagOf := func() map[string]any {
			switch rng.IntN(5) {
			case 0:
				return nil
			case 1:
				return map[string]any{"v": "not a number"}
			case 2:
				return map[string]any{"v": float64(rng.IntN(5)) + 0.5, "w": uint64(rng.IntN(3))}
			}
			return map[string]any{"v": int64(rng.IntN(6)), "w": int64(rng.IntN(3))}
		}
		leases := map[string][]uint64{} // token -> rows, per task t|u
		for step := range 60 {
			now += int64(rng.IntN(3)) * int64(time.Second/time.Microsecond) / 2
			switch op := rng.IntN(9); {
			case op <= 1: // put new rows, or again (a tag that changes)
				var ks []string
				for range 1 + rng.IntN(3) {
					k := fmt.Sprintf("k%d", rng.IntN(12))
					if !contains(ks, k) {
						ks = append(ks, k)
					}
				}
				r, _ := l.at(t, now, PrepareRecord(ks, []string{"f"}, nil, len(ks)))
				if r.Err != nil {
					t.Fatal(r.Err)
				}
				ups := make([]metadata.RowUpdate, len(ks))
				for i, k := range ks {
					ups[i] = metadata.RowUpdate{Key: k, Index: r.Reservations[i].Index,
						Fields: map[string]metadata.FieldInfo{"f": {Gen: r.Reservations[i].Gens["f"]}}, Tag: tagOf()}
					if !contains(keys, k) {
						keys = append(keys, k)
					}
				}
				rec, err := CommitRecord(ups)
				if err != nil {
					t.Fatal(err)
				}
				l.at(t, now, rec)
			case op == 2 || op == 3: // claim
				task := tasks[rng.IntN(2)]
				tok := fmt.Sprintf("%s-%d", task, step)
				r, _ := l.at(t, now, ClaimRecord(&ClaimArgs{Task: task, Token: tok, Lease: time.Duration(1+rng.IntN(3)) * time.Second,
					Rows: 1 + rng.IntN(3), Min: 1, MaxDeliveries: rng.IntN(3), Select: Select{Fields: []string{"f"}}}))
				for _, row := range r.Claimed.Rows {
					leases[tok] = append(leases[tok], row.Index)
				}
			case op == 4 || op == 5: // settle a lease: ack, nack, drop
				for tok, idx := range leases {
					task := tok[:1]
					sop := []metadata.SettleOp{metadata.Ack, metadata.Nack, metadata.Drop}[rng.IntN(3)]
					lease := tok
					if sop == metadata.Drop {
						lease = ""
					}
					l.at(t, now, SettleRecord(&SettleArgs{Task: task, Op: sop, Lease: lease, Indexes: idx}))
					delete(leases, tok)
					break
				}
			case op == 6 && len(keys) > 0: // delete a row
				k := keys[rng.IntN(len(keys))]
				l.at(t, now, DeleteRecord([]string{k}))
			case op == 7: // reset a task
				l.at(t, now, ResetRecord(tasks[rng.IntN(2)], nil))
			}
			for _, tag := range []string{"v", "w"} {
				if rng.IntN(3) != 0 {
					continue
				}
				ts := [][]string{{"t"}, {"u"}, {"t", "u"}, {"t", "x"}}[rng.IntN(4)]
				at := now + int64(rng.IntN(3))*int64(time.Second/time.Microsecond)
				v := metadata.View{Rows: l.p.List(), Tasks: l.p.Consumption(at, ts...)}
				want := v.Summary(metadata.SummaryRequest{Tasks: ts, Version: tag}).Oldest
				if got := l.p.Oldest(at, tag, ts); got != want {
					t.Fatalf("seed %d step %d: Oldest(%q, %q) = %v, the View's Summary %v", seed, step, tag, ts, got, want)
				}
			}
		}
	}
}

func contains(s []string, x string) bool {
	for _, y := range s {
		if y == x {
			return true
		}
	}
	return false
}
