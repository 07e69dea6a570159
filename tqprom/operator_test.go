package tqprom_test

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/memory"
	"github.com/tqgo/tqgo/tq"
)

// value gathers reg and returns the value of the one gauge or counter
// name with labels; the test fails when there is none.
func value(t *testing.T, reg prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	m := sample(t, reg, name, labels...)
	if m == nil {
		t.Fatalf("no %s %v gathered", name, labels)
	}
	if m.GetCounter() != nil {
		return m.GetCounter().GetValue()
	}
	return m.GetGauge().GetValue()
}

// Rows a task acked and ClearAcked cleared still count: the consumed
// total is the task's, not the rows left.
func TestConsumedSurvivesClearAcked(t *testing.T) {
	col, reg, c := setup(t)
	ctx := t.Context()
	if err := c.SetCapacity(ctx, "p", tq.Capacity{ClearAcked: []string{"t"}}); err != nil {
		t.Fatal(err)
	}
	putRows(t, c, "p", 5, 0)
	task, err := c.Task("p", "t", []string{"x"})
	if err != nil {
		t.Fatal(err)
	}
	l, err := task.Claim(ctx, 5)
	if err != nil || l.Len() != 5 {
		t.Fatalf("claim: %v", err)
	}
	if err := l.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := c.Status(ctx, "p"); err != nil || st.Rows != 0 {
		t.Fatalf("Status after the acks: %+v, %v; want the rows cleared", st, err)
	}
	if err := col.Watch(c, "p", "t"); err != nil {
		t.Fatal(err)
	}
	if got := value(t, reg, "tq_task_consumed_rows_total", "partition", "p", "task", "t"); got != 5 {
		t.Errorf("tq_task_consumed_rows_total = %v, want the 5 rows acked though cleared", got)
	}
	if got := value(t, reg, "tq_task_rows", "partition", "p", "task", "t", "state", "acked"); got != 0 {
		t.Errorf("acked rows = %v, want 0 (cleared)", got)
	}
	if got := value(t, reg, "tq_partition_rows", "partition", "p"); got != 0 {
		t.Errorf("partition rows = %v, want 0", got)
	}

	// Two more, one acked and one dropped: the total goes on from 5.
	keys := putRows(t, c, "p", 2, 0)
	if l, err = task.Claim(ctx, 1); err != nil || l.Len() != 1 {
		t.Fatalf("claim: %v", err)
	}
	if err := l.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if err := task.Drop(ctx, keys[1]); err != nil {
		t.Fatal(err)
	}
	if got := value(t, reg, "tq_task_consumed_rows_total", "partition", "p", "task", "t"); got != 7 {
		t.Errorf("tq_task_consumed_rows_total = %v, want 7", got)
	}
}

// The oldest ready row's age is how long it has waited since it was
// put, for a task with state and for one with none; 0 once none is
// ready.
func TestOldestReadyAge(t *testing.T) {
	col, reg, c := setup(t)
	ctx := t.Context()
	before := time.Now()
	putRows(t, c, "p", 3, 0)
	task, err := c.Task("p", "t", []string{"x"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := task.Claim(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := col.Watch(c, "p", "t", "idle"); err != nil {
		t.Fatal(err)
	}
	const wait = 100 * time.Millisecond
	time.Sleep(wait)
	for _, name := range []string{"t", "idle"} {
		got := value(t, reg, "tq_task_oldest_ready_age_seconds", "partition", "p", "task", name)
		// The age is of wall-clock stamps (a row's time), the bound on the
		// monotonic clock: a millisecond allows for the two drifting
		// apart, as a VM's clocks do.
		if most := time.Since(before).Seconds() + 0.001; got < wait.Seconds() || got > most {
			t.Errorf("task %s: oldest ready age %v s, want between %v and %v", name, got, wait.Seconds(), most)
		}
	}

	l, err := task.Claim(ctx, 2)
	if err != nil || l.Len() != 2 {
		t.Fatalf("claim: %v", err)
	}
	if got := value(t, reg, "tq_task_oldest_ready_age_seconds", "partition", "p", "task", "t"); got != 0 {
		t.Errorf("with no ready row: oldest ready age %v, want 0", got)
	}
}

// The oldest lease's age counts from its claim, goes on across an
// Extend, and restarts with a younger lease once the old ends.
func TestOldestLeaseAge(t *testing.T) {
	col, reg, c := setup(t)
	ctx := t.Context()
	putRows(t, c, "p", 3, 0)
	task, err := c.Task("p", "t", []string{"x"}, tq.LeaseFor(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := col.Watch(c, "p", "t"); err != nil {
		t.Fatal(err)
	}
	if got := value(t, reg, "tq_task_oldest_lease_age_seconds", "partition", "p", "task", "t"); got != 0 {
		t.Errorf("with no lease: %v, want 0", got)
	}
	first := time.Now()
	l, err := task.Claim(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got, most := value(t, reg, "tq_task_oldest_lease_age_seconds", "partition", "p", "task", "t"), time.Since(first).Seconds(); got > most {
		t.Errorf("right after the claim: %v s, want at most the %v s since it", got, most)
	}
	const wait = 100 * time.Millisecond
	time.Sleep(wait)
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	second := time.Now()          // l2 is granted after this
	l2, err := task.Claim(ctx, 1) // a younger lease: the oldest is still the first
	if err != nil {
		t.Fatal(err)
	}
	got := value(t, reg, "tq_task_oldest_lease_age_seconds", "partition", "p", "task", "t")
	if most := time.Since(first).Seconds() + 1; got < wait.Seconds() || got > most {
		t.Errorf("after %v and an Extend: %v s, want between %v and %v", wait, got, wait.Seconds(), most)
	}
	if err := l.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	// The oldest running is l2, granted after second (l1's age would be
	// more, by at least wait).
	got2 := value(t, reg, "tq_task_oldest_lease_age_seconds", "partition", "p", "task", "t")
	if most := time.Since(second).Seconds(); got2 > most {
		t.Errorf("after the oldest lease ended: %v s, want at most the %v s since the other's claim", got2, most)
	}
	if err := l2.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if got := value(t, reg, "tq_task_oldest_lease_age_seconds", "partition", "p", "task", "t"); got != 0 {
		t.Errorf("with every lease ended: %v, want 0", got)
	}
}

// Presence groups are reported by state, member names never a label: an
// alive member, one that left, one gone, and a group with none.
func TestPresenceMembers(t *testing.T) {
	col, reg := registered(t)
	data, meta := memory.New(), memory.NewMetaStore()
	client := func(name string) *tq.Client {
		c, err := tq.New(backends.Engine{Data: data, Meta: meta}, tq.WithName(name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	c := client("watcher")
	ctx := t.Context()
	alive, err := client("rollout-1").Announce(ctx, "rollout", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	defer alive.Close()
	left, err := client("reward-1").Announce(ctx, "reward", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := left.Close(); err != nil {
		t.Fatal(err)
	}
	dying := client("rollout-2")
	if _, err := dying.Announce(ctx, "rollout", 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	_ = dying.Close() // stops renewing without leaving: gone after three intervals
	closed := time.Now()
	if err := col.WatchPresence(c, "rollout", "reward", "train"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if value(t, reg, "tq_presence_members", "group", "rollout", "state", "gone") == 1 || time.Now().After(deadline) {
			break
		}
	}
	want := `
		tq_presence_members{group="reward",state="alive"} 0
		tq_presence_members{group="reward",state="gone"} 0
		tq_presence_members{group="reward",state="left"} 1
		tq_presence_members{group="rollout",state="alive"} 1
		tq_presence_members{group="rollout",state="gone"} 1
		tq_presence_members{group="rollout",state="left"} 0
		tq_presence_members{group="train",state="alive"} 0
		tq_presence_members{group="train",state="gone"} 0
		tq_presence_members{group="train",state="left"} 0
		tq_presence_last_seen_age_seconds{group="reward"} 0
		tq_presence_last_seen_age_seconds{group="train"} 0
	`
	compare(t, reg, want, "tq_presence_members")
	// rollout's stalest member not left is the gone one, seen before it
	// closed: at least three of its intervals ago.
	got := value(t, reg, "tq_presence_last_seen_age_seconds", "group", "rollout")
	if most := time.Since(closed).Seconds() + 1; got < 0.03 || got > most {
		t.Errorf("rollout last seen %v s ago, want between 0.03 and %v", got, most)
	}
	for _, g := range []string{"reward", "train"} {
		if got := value(t, reg, "tq_presence_last_seen_age_seconds", "group", g); got != 0 {
			t.Errorf("%s: last seen age %v, want 0 (no member that has not left)", g, got)
		}
	}
	if problems, err := testutil.CollectAndLint(col); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}

	col.UnwatchPresence("rollout", "reward", "train")
	for _, name := range []string{"tq_presence_members", "tq_presence_last_seen_age_seconds"} {
		if f := family(t, reg, name); f != nil {
			t.Errorf("after UnwatchPresence: %v", f)
		}
	}
}

// Dead rows whose lease ended are told apart from those that died of an
// error: tq_task_dead_lease_ended_rows counts the first.
func TestDeadLeaseEndedRows(t *testing.T) {
	col, reg, c := setup(t)
	ctx := t.Context()
	putRows(t, c, "p", 2, 0)
	short, err := c.Task("p", "t", []string{"x"}, tq.MaxDeliveries(1), tq.LeaseFor(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := col.Watch(c, "p", "t"); err != nil {
		t.Fatal(err)
	}
	if _, err := short.Claim(ctx, 1); err != nil { // its lease ends: dead
		t.Fatal(err)
	}
	long, err := c.Task("p", "t", []string{"x"}, tq.MaxDeliveries(1), tq.LeaseFor(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	l, err := long.Claim(ctx, 1)
	if err != nil || l.Len() != 1 {
		t.Fatalf("claim: %v, %v", l, err)
	}
	if err := l.NackErr(ctx, 0, errors.New("bad row")); err != nil { // dead of an error
		t.Fatal(err)
	}
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		dead := value(t, reg, "tq_task_rows", "partition", "p", "task", "t", "state", "dead")
		ended := value(t, reg, "tq_task_dead_lease_ended_rows", "partition", "p", "task", "t")
		if dead == 2 && ended == 1 {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("dead rows %v, of a lease's end %v; want 2 and 1", dead, ended)
		}
	}
}
