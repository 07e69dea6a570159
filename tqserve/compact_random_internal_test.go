package tqserve

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends/metadata"
)

// Any claim's reply asked compact reads back as its whole reply does,
// with a fieldMemo kept across the replies or not: rows of nil, empty,
// alike and other fields, with tags or not; deliveries of the claim's
// lease, of another lease or none, with or without holder, times,
// reasons; units by row, of a group, or none; cleared rows.
func TestCompactClaimReplyRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	at := func(s int64) time.Time { return time.Unix(1_700_000_000+s, 7) }
	a := map[string]metadata.FieldInfo{"x": {DType: "int64", Shape: []int64{4}, Gen: 1}}
	// Fields alike but in one of their attributes, each in a map of its
	// own or shared.
	infos := []metadata.FieldInfo{
		{DType: "int64", Shape: []int64{4}, Gen: 1},
		{DType: "int64", Shape: []int64{4}, Gen: 2},
		{DType: "int32", Shape: []int64{4}, Gen: 1},
		{DType: "int64", Shape: []int64{5}, Gen: 1},
		{DType: "int64", Shape: []int64{}, Gen: 1},
		{DType: "int64", Gen: 1},
		{DType: "int64", Shape: []int64{4}, Gen: 1, BackendTag: "t"},
	}
	fields := func() map[string]metadata.FieldInfo {
		switch k := rng.IntN(len(infos) + 3); k {
		case len(infos):
			return nil
		case len(infos) + 1:
			return map[string]metadata.FieldInfo{}
		case len(infos) + 2:
			return a
		default:
			return map[string]metadata.FieldInfo{"x": infos[k]}
		}
	}
	var memo fieldMemo
	for it := range 5000 {
		var c metadata.Claimed
		if rng.IntN(4) > 0 {
			c.Lease = "w|1"
			c.Until = at(30)
		}
		n := rng.IntN(5)
		for i := range n {
			r := &metadata.Row{Key: fmt.Sprint(i), Index: uint64(rng.IntN(3) + 10*i), Fields: fields()}
			if rng.IntN(3) == 0 {
				r.Tag = map[string]any{"a": int64(i)}
			}
			c.Rows = append(c.Rows, r)
		}
		nd := n
		if rng.IntN(5) == 0 {
			nd = rng.IntN(5)
		}
		for i := range nd {
			d := metadata.Delivery{Index: uint64(10 * i), State: metadata.State(rng.IntN(5)), Deliveries: rng.IntN(3), Max: rng.IntN(2)}
			if i < n && rng.IntN(2) == 0 {
				d.Index = c.Rows[i].Index
			}
			d.Lease = []string{c.Lease, "v|2", ""}[rng.IntN(3)]
			d.Holder = []string{"w", "v", ""}[rng.IntN(3)]
			d.Until = []time.Time{c.Until, at(31), {}}[rng.IntN(3)]
			d.Granted = []time.Time{at(1), at(2), {}}[rng.IntN(3)]
			if rng.IntN(4) == 0 {
				d.Reason, d.At = "r", at(-1)
			}
			if rng.IntN(6) == 0 {
				d.At = at(-2)
			}
			c.Deliveries = append(c.Deliveries, d)
		}
		switch rng.IntN(3) {
		case 0:
			for i := range n {
				c.Units = append(c.Units, []int{i})
			}
		case 1:
			if n > 1 {
				c.Units = [][]int{{0, 1}}
			}
		}
		if rng.IntN(3) == 0 {
			c.Cleared = []*metadata.Row{{Key: "c", Index: 99, Fields: a}}
		}
		_, w, _ := claimOnWire(t, &c, false, nil)
		_, k, _ := claimOnWire(t, &c, true, &memo)
		if !reflect.DeepEqual(w, k) {
			t.Fatalf("claim %d: %+v\nits whole reply read back as %+v\nits compact one as %+v", it, c, w, k)
		}
		for i, r := range k.Rows {
			// (The wire does not tell an empty table from none.)
			if want := c.Rows[i].Fields; len(want) > 0 && !reflect.DeepEqual(r.Fields, want) || len(want) == 0 && r.Fields != nil {
				t.Fatalf("claim %d: row %d read back with fields %v, want %v", it, i, r.Fields, want)
			}
		}
	}
}
