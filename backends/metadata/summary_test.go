package metadata

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
)

// TestSummaryCounts: a Summary counts rows whose maps are shared in runs
// (as Merger shares them) as it counts rows of maps of their own, by
// field, by state and by missing field; its oldest version passes over
// what is consumed and what is not a number.
func TestSummaryCounts(t *testing.T) {
	ab := map[string]FieldInfo{"a": {}, "b": {}}
	a := map[string]FieldInfo{"a": {}}
	t0 := time.Unix(1000, 0)
	v := View{
		Rows: []*Row{
			{Index: 1, Fields: ab, Tag: map[string]any{"v": int64(5)}},
			{Index: 2, Fields: ab, Tag: map[string]any{"v": math.NaN()}},
			{Index: 3, Fields: a, Tag: map[string]any{"v": "x"}},
			{Index: 4, Fields: ab, Tag: map[string]any{"v": uint64(3)}},
			{Index: 5, Fields: map[string]FieldInfo{"a": {}, "b": {}}, Tag: map[string]any{"v": 7.5}},
			{Index: 6, Fields: a},
		},
		Since: []time.Time{t0.Add(3), t0.Add(2), t0.Add(1), {}, t0.Add(4), t0.Add(5)},
		Tasks: map[string][]Delivery{"t": {
			{Index: 1, State: Leased, Deliveries: 2, Lease: "w|1", Holder: "w", Until: t0.Add(time.Minute), Granted: t0.Add(-time.Second)},
			{Index: 4, State: Acked, Deliveries: 1},
			{Index: 6, State: Dead, Deliveries: 1},
		}},
		Consumed: map[string]uint64{"t": 1, "gone": 4},
	}
	s := v.Summary(SummaryRequest{Counts: true})
	if s.Rows != 6 || s.Fields["a"] != 6 || s.Fields["b"] != 4 || len(s.Fields) != 2 || !s.OldestRow.Equal(t0.Add(1)) {
		t.Errorf("rows %d, fields %v, oldest %v; want 6 rows, a 6, b 4, oldest row %v", s.Rows, s.Fields, s.OldestRow, t0.Add(1))
	}
	if _, ok := s.Tasks["gone"]; !ok || len(s.Tasks) != 2 || s.Tasks["gone"].Consumed != 4 {
		t.Errorf("tasks %v: want t, and gone with its consumed count", s.Tasks)
	}
	ts := v.Summary(SummaryRequest{Tasks: []string{"t"}, Fields: []string{"b"}, Counts: true, Progress: true}).Tasks["t"]
	if ts.Ready != 2 || ts.Waiting != 1 || ts.Leased != 1 || ts.Acked != 1 || ts.Dead != 1 || ts.Redelivered != 1 {
		t.Errorf("task t waiting for b: %+v; want 2 ready (2 and 5), 1 waiting (3), 1 leased, acked and dead, 1 redelivered", ts)
	}
	if !ts.OldestReady.Equal(t0.Add(2)) || len(ts.Leases) != 1 || ts.Leases[0] != (LeaseSummary{Holder: "w", Rows: 1, Until: t0.Add(time.Minute), Granted: t0.Add(-time.Second), Deliveries: 2, ID: LeaseID("w|1")}) {
		t.Errorf("task t: oldest ready %v, leases %+v", ts.OldestReady, ts.Leases)
	}
	if len(ts.Missing) != 1 || ts.Missing["b"] != 2 {
		t.Errorf("missing %v: want b missing from rows 3 and 6 (dead is not consumed)", ts.Missing)
	}
	if o := v.Summary(SummaryRequest{Tasks: []string{"t"}, Version: "v"}).Oldest; o != 5 {
		t.Errorf("oldest version unconsumed by t: %v, want 5 (row 1, leased; NaN and text are no numbers, 3 acked)", o)
	}
	for _, bad := range []SummaryRequest{{Tasks: []string{""}}, {Fields: []string{"a b"}}, {Version: "v"}} {
		if err := bad.Check(); !errors.Is(err, backends.ErrInvalid) {
			t.Errorf("Check(%+v) = %v, want ErrInvalid", bad, err)
		}
	}
}
