package tqtest

import (
	"testing"
	"time"

	"github.com/tqgo/tqgo/tq"
)

// consumeStatusHistory: Status tells what its row counts cannot once rows
// are cleared or waiting: each task's rows consumed ever (ClearAcked's
// included, the task listed though its rows are gone), when the oldest
// ready row became ready, and an ID per lease that an Extend keeps.
func consumeStatusHistory(t *testing.T, e Engine) {
	c := e.Open(t)
	ctx := t.Context()
	p := "history"
	if err := c.SetCapacity(ctx, p, tq.Capacity{ClearAcked: []string{"w"}}); err != nil {
		t.Fatal(err)
	}
	// Clocks of an engine with servers are converted: allow for that.
	const slack = time.Second
	before := time.Now()
	keys := keysN(5)
	putRows(t, c, p, keys, nil, "a")
	after := time.Now()
	task := mustTask(t, c, p, "w", []string{"a"}, tq.LeaseFor(time.Minute))

	st := mustStatusOf(t, c, p)
	if st.OldestRow.Before(before.Add(-slack)) || st.OldestRow.After(after.Add(slack)) {
		t.Errorf("Status.OldestRow %v, want between %v and %v", st.OldestRow, before, after)
	}
	if ts := mustStatus(t, task); ts.OldestReady.Before(before.Add(-slack)) || ts.OldestReady.After(after.Add(slack)) {
		t.Errorf("TaskStatus.OldestReady %v, want between %v and %v", ts.OldestReady, before, after)
	}

	l1 := mustClaim(t, task, 2)
	l2 := mustClaim(t, task, 1)
	ids := map[string]bool{}
	for _, ls := range mustStatusOf(t, c, p).Tasks["w"].Leases {
		if ls.ID == "" || ids[ls.ID] {
			t.Errorf("lease IDs: %q empty or twice among %v", ls.ID, ids)
		}
		ids[ls.ID] = true
	}
	if len(ids) != 2 {
		t.Fatalf("%d lease IDs, want 2", len(ids))
	}
	if err := l1.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, ls := range mustStatusOf(t, c, p).Tasks["w"].Leases {
		if !ids[ls.ID] {
			t.Errorf("after an Extend, lease ID %q is new (IDs before: %v)", ls.ID, ids)
		}
	}

	mustAck(t, l1)
	mustAck(t, l2)
	l3 := mustClaim(t, task, 2)
	mustAck(t, l3)
	st = mustStatusOf(t, c, p)
	ts, listed := st.Tasks["w"]
	if st.Rows != 0 || !listed || ts.Consumed != 5 || ts.Acked != 0 || ts.Ready != 0 || !ts.OldestReady.IsZero() {
		t.Fatalf("every row acked and cleared: rows %d, task listed %v: %+v; want 0 rows and the task listed with Consumed 5", st.Rows, listed, ts)
	}
	if ts := mustStatus(t, task); ts.Consumed != 5 {
		t.Errorf("Task.Status Consumed %d, want 5", ts.Consumed)
	}
	if err := c.ClearPartition(ctx, p); err != nil {
		t.Fatal(err)
	}
	if st := mustStatusOf(t, c, p); len(st.Tasks) != 0 {
		t.Errorf("after ClearPartition: %+v, want no task", st.Tasks)
	}
}
