package tqtest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tqgo/tqgo/tq"
)

// deadlineCases: group deadlines, on every engine.
func deadlineCases() []testCase {
	return []testCase{
		{"GroupDeadline/Partial", deadlinePartial},
		{"GroupDeadline/Rerequest", deadlineRerequest},
		{"GroupDeadline/Ranks", deadlineRanks},
		{"GroupDeadline/Invalid", deadlineInvalid},
	}
}

func putGroup(t *testing.T, c *tq.Client, p string, keys []string, uid string) {
	t.Helper()
	tags := make([]tq.Tag, len(keys))
	for i := range tags {
		tags[i] = tq.Tag{"uid": uid}
	}
	putRows(t, c, p, keys, tags, "x")
}

// deadlinePartial: a group incomplete past its deadline is leased as it
// is, its rows flagged partial, by a Wait that wakes for it (across
// clients); before the deadline only complete groups are leased.
func deadlinePartial(t *testing.T, e Engine) {
	prod, cons := e.Open(t), e.Open(t)
	p := "deadline-partial"
	const d = 300 * time.Millisecond
	task := mustTask(t, cons, p, "train", []string{"x"}, tq.WithGroups(tq.GroupTag("uid"), 3), tq.GroupDeadline(d, true))
	putGroup(t, prod, p, []string{"a0", "a1", "a2"}, "a")
	putGroup(t, prod, p, []string{"b0", "b1"}, "b")
	l := mustClaim(t, task, 6)
	if !slices.Equal(l.Keys(), []string{"a0", "a1", "a2"}) || l.Partial != nil {
		t.Fatalf("claim before the deadline: %q partial %v, want the complete group alone", l.Keys(), l.Partial)
	}
	mustAck(t, l)
	st := mustStatus(t, task)
	if len(st.Groups) != 1 || !strings.HasSuffix(st.Groups[0].ID, "b") || st.Groups[0].Rows != 2 || st.Groups[0].Overdue {
		t.Fatalf("waiting groups before the deadline: %+v", st.Groups)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	l, err := task.Wait(ctx, 3)
	if err != nil {
		t.Fatalf("Wait for the overdue group: %v", err)
	}
	if !slices.Equal(l.Keys(), []string{"b0", "b1"}) || !slices.Equal(l.Partial, []bool{true, true}) {
		t.Fatalf("overdue group: %q partial %v, want b0 b1 flagged partial", l.Keys(), l.Partial)
	}
	if since := time.Since(st.Groups[0].Since); since < d {
		t.Errorf("a group released %v after its first row, before its deadline %v", since, d)
	}
	mustAck(t, l)
	// A member arriving after its group was released starts a group anew.
	putGroup(t, prod, p, []string{"b2"}, "b")
	if l := mustClaim(t, task, 3); l.Len() != 0 {
		t.Errorf("a lone late member leased at once: %q", l.Keys())
	}
}

// deadlineRerequest: without partial, an overdue group keeps waiting and
// is listed as a straggler until its missing member is written; then it
// is leased whole.
func deadlineRerequest(t *testing.T, e Engine) {
	prod, cons := e.Open(t), e.Open(t)
	p := "deadline-rerequest"
	const d = 200 * time.Millisecond
	task := mustTask(t, cons, p, "train", []string{"x"}, tq.WithGroups(tq.GroupTag("uid"), 3), tq.GroupDeadline(d, false))
	putGroup(t, prod, p, []string{"c0", "c1"}, "c")
	if l := mustClaim(t, task, 3); l.Len() != 0 { // the engine learns the task's groups from its claims
		t.Fatalf("an incomplete group leased: %q", l.Keys())
	}
	if s, err := task.Stragglers(t.Context()); err != nil || len(s) != 0 {
		t.Fatalf("stragglers before the deadline: %+v, %v", s, err)
	}
	var s []tq.GroupWait
	for deadline := time.Now().Add(10 * time.Second); len(s) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the incomplete group never became a straggler")
		}
		var err error
		if s, err = task.Stragglers(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if len(s) != 1 || !strings.HasSuffix(s[0].ID, "c") || s[0].Rows != 2 || !s[0].Overdue {
		t.Fatalf("stragglers: %+v", s)
	}
	if l := mustClaim(t, task, 3); l.Len() != 0 {
		t.Fatalf("an overdue group leased without partial release: %q", l.Keys())
	}
	putGroup(t, prod, p, []string{"c2"}, "c")
	l := mustClaim(t, task, 3)
	if !slices.Equal(l.Keys(), []string{"c0", "c1", "c2"}) || l.Partial != nil {
		t.Fatalf("completed group: %q partial %v", l.Keys(), l.Partial)
	}
	if s, err := task.Stragglers(t.Context()); err != nil || len(s) != 0 {
		t.Errorf("stragglers once complete: %+v, %v", s, err)
	}
}

// deadlineInvalid: a deadline needs groups, and a positive duration.
func deadlineInvalid(t *testing.T, e Engine) {
	c := e.Open(t)
	for name, opts := range map[string][]tq.TaskOption{
		"no groups": {tq.GroupDeadline(time.Second, true)},
		"zero":      {tq.WithGroups(tq.GroupTag("uid"), 2), tq.GroupDeadline(0, true)},
		"budget":    {tq.WithGroups(tq.GroupTag("uid"), 2), tq.TokenBudget("len", 10), tq.GroupDeadline(time.Second, false)},
	} {
		if _, err := c.Task("deadline-bad", "t", []string{"x"}, opts...); !errors.Is(err, tq.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

// deadlineRanks: overdue groups released to data-parallel ranks (on two
// clients) come flagged partial in every rank's share, not only in the
// share of the rank whose claim chose the batch.
func deadlineRanks(t *testing.T, e Engine) {
	prod, c0, c1 := e.Open(t), e.Open(t), e.Open(t)
	p := "deadline-ranks"
	opts := func(rank int) []tq.TaskOption {
		return []tq.TaskOption{tq.WithGroups(tq.GroupTag("uid"), 3), tq.GroupDeadline(200*time.Millisecond, true), tq.Ranks(2, rank, "")}
	}
	r0 := mustTask(t, c0, p, "train", []string{"x"}, opts(0)...)
	r1 := mustTask(t, c1, p, "train", []string{"x"}, opts(1)...)
	// One commit: both groups fall due at once, and one batch takes both.
	putRows(t, prod, p, []string{"b0", "b1", "c0", "c1"}, []tq.Tag{{"uid": "b"}, {"uid": "b"}, {"uid": "c"}, {"uid": "c"}}, "x")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	l0, err := r0.Wait(ctx, 6)
	if err != nil {
		t.Fatalf("rank 0 Wait for the overdue groups: %v", err)
	}
	l1 := mustClaim(t, r1, 6)
	all := append(l0.Keys(), l1.Keys()...)
	slices.Sort(all)
	if !slices.Equal(all, []string{"b0", "b1", "c0", "c1"}) {
		t.Fatalf("shares %q and %q, want both partial groups split between the ranks", l0.Keys(), l1.Keys())
	}
	for rank, l := range []*tq.Lease{l0, l1} {
		if l.Len() == 0 {
			continue
		}
		if len(l.Partial) != l.Len() || slices.Contains(l.Partial, false) {
			t.Errorf("rank %d share %q: partial %v, want every row flagged", rank, l.Keys(), l.Partial)
		}
	}
}
