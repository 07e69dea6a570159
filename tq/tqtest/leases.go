package tqtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tqgo/tqgo/tq"
)

// leaseCases: the lease rules as their docs state them, on every engine.
func leaseCases() []testCase {
	return []testCase{
		{"Leases/RankEmptyShareTurn", leaseRankEmptyShare},
		{"Leases/StaleDropNotSkipped", leaseStaleDropNotSkipped},
		{"Leases/ExtendLostKeepsUntil", leaseExtendLost},
		{"Leases/ConsumeStopKeepsResult", leaseConsumeStop},
		{"Leases/PartialAtLeast", leasePartialAtLeast},
		{"Leases/GroupRemainder", leaseGroupRemainder},
		{"Leases/GroupsAsStatus", leaseGroupsAsStatus},
		{"Leases/OwnSamplerStaleView", leaseOwnSamplerStaleView},
		{"Leases/DropWaiting", leaseDropWaiting},
	}
}

// leaseRankEmptyShare: a rank whose share of a batch is empty still has
// its turn of that batch when the other ranks settled theirs first: its
// claim takes that batch (leasing nothing), not a new one.
func leaseRankEmptyShare(t *testing.T, e Engine) {
	prod := e.Open(t)
	p := "rank-empty-share"
	var ranks [3]*tq.Task
	for r := range ranks {
		ranks[r] = mustTask(t, e.Open(t), p, "train", []string{"x"}, tq.Ranks(3, r, ""))
	}
	putRows(t, prod, p, []string{"a", "b"}, nil, "x")
	// Two units for three ranks: one rank's share is empty.
	var shares [3]*tq.Lease
	for _, r := range []int{0, 1} {
		shares[r] = mustClaim(t, ranks[r], 2)
	}
	empty := 2
	if shares[0].Len()+shares[1].Len() != 2 {
		// The empty share is rank 0's or 1's: rank 2 takes its share now,
		// and the test's premise (the empty one comes last) is another
		// ordering of the same rule.
		shares[2] = mustClaim(t, ranks[2], 2)
		for r, l := range shares {
			if l.Len() == 0 {
				empty = r
			}
		}
		t.Skipf("the split gave rank %d the empty share", empty)
	}
	for _, r := range []int{0, 1} {
		mustAck(t, shares[r])
	}
	putRows(t, prod, p, []string{"c", "d"}, nil, "x")
	l := mustClaim(t, ranks[2], 2)
	if l.Len() != 0 {
		t.Fatalf("rank 2's first claim: %q, want its empty share of the first batch", l.Keys())
	}
	if st := mustStatus(t, ranks[2]); st.Leased != 0 {
		t.Fatalf("rank 2's first claim opened a batch (%d rows leased): its turn of the first batch was lost", st.Leased)
	}
	// Every rank's second claim is of the second batch.
	var got []string
	for r := range ranks {
		l := mustClaim(t, ranks[r], 2)
		got = append(got, l.Keys()...)
		mustAck(t, l)
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"c", "d"}) {
		t.Fatalf("the ranks' second claims hold %q, want c d", got)
	}
}

// leaseStaleDropNotSkipped: with Staleness(..., true) the stale rows a
// claim drops count in Stats().Dropped only, whether the engine chose
// (the default sampler) or the task's own sampler did.
func leaseStaleDropNotSkipped(t *testing.T, e Engine) {
	c := e.Open(t)
	p := "stale-drop-stats"
	keys := keysN(4)
	tags := make([]tq.Tag, len(keys))
	for i := range tags {
		tags[i] = tq.Tag{"version": i / 2, "len": 1} // versions 0 0 1 1
	}
	putRows(t, c, p, keys, tags, "a")
	for name, opts := range map[string][]tq.TaskOption{
		"engine":  {tq.Staleness("version", 0, true)},
		"sampler": {tq.Staleness("version", 0, true), tq.TokenBudget("len", 100)},
	} {
		task := mustTask(t, c, p, name, []string{"a"}, opts...)
		task.SetVersion(1)
		l := mustClaim(t, task, 4)
		if !slices.Equal(l.Keys(), keys[2:]) {
			t.Fatalf("%s: claim at version 1: %q, want %q", name, l.Keys(), keys[2:])
		}
		if st := task.Stats(); st.Dropped != 2 || st.Skipped != 0 {
			t.Errorf("%s: stats %+v, want 2 dropped and none skipped", name, st)
		}
	}
}

// leaseExtendLost: an Extend that renews no row (every row acked) leaves
// Until as it was.
func leaseExtendLost(t *testing.T, e Engine) {
	c := e.Open(t)
	p := "extend-lost"
	putRows(t, c, p, []string{"a", "b"}, nil, "x")
	task := mustTask(t, c, p, "t", []string{"x"}, tq.LeaseFor(time.Minute))
	l := mustClaim(t, task, 2)
	until := l.Until()
	mustAck(t, l)
	err := l.Extend(t.Context(), time.Hour)
	var lost *tq.LeaseLostError
	if !errors.As(err, &lost) || len(lost.Keys) != 2 {
		t.Fatalf("Extend of acked rows: %v, want both lost", err)
	}
	if !l.Until().Equal(until) {
		t.Fatalf("Until moved from %v to %v by an Extend that renewed nothing", until, l.Until())
	}
}

// leaseConsumeStop: when Consume's context ends while a handler runs, the
// handler's result still settles its rows: nil acks them, Permanent drops
// them; only a failure gives them back.
func leaseConsumeStop(t *testing.T, e Engine) {
	c := e.Open(t)
	for _, tc := range []struct {
		name   string
		result func(ctx context.Context) error
		check  func(st tq.TaskStatus) bool
	}{
		{"nil", func(context.Context) error { return nil }, func(st tq.TaskStatus) bool { return st.Acked == 1 }},
		{"permanent", func(context.Context) error { return tq.Permanent(errors.New("bad row")) }, func(st tq.TaskStatus) bool { return st.Dropped == 1 }},
		{"failed", func(ctx context.Context) error { return ctx.Err() }, func(st tq.TaskStatus) bool { return st.Ready == 1 && st.Redelivered == 1 }},
	} {
		p := "consume-stop-" + tc.name
		putRows(t, c, p, []string{"a"}, nil, "x")
		task := mustTask(t, c, p, "t", []string{"x"})
		ctx, cancel := context.WithCancel(t.Context())
		started := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- task.Consume(ctx, 1, func(hctx context.Context, l *tq.Lease) error {
				close(started)
				<-hctx.Done() // the handler finishes as Consume stops
				return tc.result(hctx)
			})
		}()
		select {
		case <-started:
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: the handler never ran", tc.name)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("%s: Consume: %v", tc.name, err)
		}
		if st := mustStatus(t, task); !tc.check(st) {
			t.Errorf("%s: after Consume stopped: %+v", tc.name, st)
		}
		if tc.name == "failed" {
			// Given back, saying why.
			ks, err := task.Consumption(t.Context(), "a")
			if err != nil {
				t.Fatal(err)
			}
			if r := ks[0].Tasks["t"].Reason; !strings.Contains(r, "consume stopped") {
				t.Errorf("%s: the row given back as Consume stopped has reason %q", tc.name, r)
			}
		}
	}
}

// leasePartialAtLeast: with a partial GroupDeadline, AtLeast still counts
// no more rows than the whole groups n holds: Claim(3, AtLeast(3)) with
// groups of 2 leases a complete group.
func leasePartialAtLeast(t *testing.T, e Engine) {
	c := e.Open(t)
	p := "partial-at-least"
	task := mustTask(t, c, p, "t", []string{"x"}, tq.WithGroups(tq.GroupTag("uid"), 2), tq.GroupDeadline(time.Hour, true))
	putGroup(t, c, p, []string{"a0", "a1"}, "a")
	l := mustClaim(t, task, 3, tq.AtLeast(3))
	if !slices.Equal(l.Keys(), []string{"a0", "a1"}) {
		t.Fatalf("Claim(3, AtLeast(3)) with one complete group of 2: %q, want a0 a1", l.Keys())
	}
}

// leaseGroupRemainder: a group holding more ready rows than a whole group
// (3 of a group of 2) has its remainder waiting: listed, and past the
// deadline released as a partial group.
func leaseGroupRemainder(t *testing.T, e Engine) {
	c := e.Open(t)
	p := "group-remainder"
	const d = 300 * time.Millisecond
	task := mustTask(t, c, p, "t", []string{"x"}, tq.WithGroups(tq.GroupTag("uid"), 2), tq.GroupDeadline(d, true))
	if l := mustClaim(t, task, 4); l.Len() != 0 { // the engine learns the task's groups from its claims
		t.Fatalf("a claim of nothing leased %q", l.Keys())
	}
	putGroup(t, c, p, []string{"a0", "a1", "a2"}, "a")
	st := mustStatus(t, task)
	if len(st.Groups) != 1 || !strings.HasSuffix(st.Groups[0].ID, "a") || st.Groups[0].Rows != 1 {
		t.Fatalf("waiting groups: %+v, want a's third row waiting", st.Groups)
	}
	time.Sleep(d)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		s, err := task.Stragglers(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if len(s) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stragglers: %+v, want a's remainder", s)
		}
	}
	l := mustClaim(t, task, 4)
	if !slices.Equal(l.Keys(), []string{"a0", "a1", "a2"}) || !slices.Equal(l.Partial, []bool{false, false, true}) {
		t.Fatalf("claim past the deadline: %q partial %v, want a0 a1 whole and a2 partial", l.Keys(), l.Partial)
	}
}

// leaseGroupsAsStatus: Status counts a row whose lease ended as ready,
// and lists its group as the next claim finds it (complete: not waiting).
func leaseGroupsAsStatus(t *testing.T, e Engine) {
	c := e.Open(t)
	p := "groups-as-status"
	const lease = 300 * time.Millisecond
	task := mustTask(t, c, p, "t", []string{"x"}, tq.WithGroups(tq.GroupTag("uid"), 3), tq.LeaseFor(lease))
	putGroup(t, c, p, []string{"a0", "a1", "a2"}, "a")
	l := mustClaim(t, task, 3)
	if l.Len() != 3 {
		t.Fatalf("claim: %q", l.Keys())
	}
	if err := l.Nack(t.Context(), 0, "a0"); err != nil {
		t.Fatal(err)
	}
	if st := mustStatus(t, task); st.Ready != 1 || len(st.Groups) != 1 || st.Groups[0].Rows != 1 {
		t.Fatalf("one row back: %+v", st)
	}
	time.Sleep(lease)
	st := mustStatus(t, task)
	for ; st.Ready != 3; st = mustStatus(t, task) {
		time.Sleep(20 * time.Millisecond) // the engine's clock may run behind this one
	}
	if len(st.Groups) != 0 {
		t.Fatalf("every row of the group ready (%+v), and the group listed waiting: %+v", st, st.Groups)
	}
}

// leaseOwnSamplerStaleView: a task with its own sampler (TokenBudget) on
// a client that has not seen another client's commit: its Wait leases the
// row that commit made ready.
func leaseOwnSamplerStaleView(t *testing.T, e Engine) {
	prod, cons := e.Open(t), e.Open(t)
	p := "own-sampler-stale"
	task := mustTask(t, cons, p, "t", []string{"x"}, tq.TokenBudget("len", 10))
	if l := mustClaim(t, task, 1); l.Len() != 0 {
		t.Fatalf("claim of nothing: %q", l.Keys())
	}
	putRows(t, prod, p, []string{"a"}, []tq.Tag{{"len": 1}}, "x")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	l, err := task.Wait(ctx, 1)
	if err != nil {
		t.Fatalf("Wait with a ready row: %v", err)
	}
	if !slices.Equal(l.Keys(), []string{"a"}) {
		t.Fatalf("Wait: %q, want a", l.Keys())
	}
}

// leaseDropWaiting: Task.Drop drops a row still waiting for a field of the
// task, as its doc says (not only ready or dead rows); a leased or acked
// row is lost.
func leaseDropWaiting(t *testing.T, e Engine) {
	c := e.Open(t)
	p := "drop-waiting"
	putRows(t, c, p, []string{"a", "b"}, nil, "x")
	task := mustTask(t, c, p, "t", []string{"x", "y"})
	if err := task.Drop(t.Context(), "a"); err != nil {
		t.Fatalf("Drop of a row waiting for y: %v", err)
	}
	putRows(t, c, p, []string{"a", "b"}, nil, "y")
	l := mustClaim(t, task, 2)
	if !slices.Equal(l.Keys(), []string{"b"}) {
		t.Fatalf("claim after the drop: %q, want b", l.Keys())
	}
	var lost *tq.LeaseLostError
	if err := task.Drop(t.Context(), "b"); !errors.As(err, &lost) || fmt.Sprint(lost.Keys) != "[b]" {
		t.Fatalf("Drop of a leased row: %v, want b lost", err)
	}
}
