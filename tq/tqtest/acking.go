package tqtest

import (
	"context"
	"errors"
	"testing"

	"github.com/tqgo/tqgo/tq"
)

// ackingCases: a claim that acknowledges the previous lease (Acking).
func ackingCases() []testCase {
	return []testCase{
		{"Acking/AcksThenClaims", ackingAcksThenClaims},
		{"Acking/OtherTaskRefused", ackingOtherTask},
		{"Acking/LostNotAnError", ackingLost},
	}
}

// ackingAcksThenClaims: a claim given Acking(l) acknowledges every row of
// l (never delivered again, counted acked) and leases rows of its own,
// as l.Ack then Claim would; a Wait does the same; an empty lease acks
// nothing.
func ackingAcksThenClaims(t *testing.T, e Engine) {
	ctx := context.Background()
	c := e.Open(t)
	p := "acking"
	putRows(t, c, p, []string{"a", "b", "c", "d", "e", "f"}, nil, "x")
	task := mustTask(t, c, p, "w", []string{"x"})
	seen := map[string]bool{}
	take := func(l *tq.Lease) {
		t.Helper()
		for _, k := range l.Keys() {
			if seen[k] {
				t.Fatalf("%s delivered again after it was acknowledged by a claim", k)
			}
			seen[k] = true
		}
	}
	l := mustClaim(t, task, 2)
	take(l)
	next, err := task.Claim(ctx, 2, tq.Acking(l))
	if err != nil || next.Len() != 2 {
		t.Fatalf("claim acking the first lease: %v, %v", next, err)
	}
	take(next)
	if w := mustStatus(t, task); w.Acked != 2 || w.Leased != 2 || w.Ready != 2 {
		t.Fatalf("after a claim acking 2: %+v, want 2 acked, 2 leased, 2 ready", w)
	}
	last, err := task.Wait(ctx, 2, tq.Acking(next))
	if err != nil || last.Len() != 2 {
		t.Fatalf("wait acking the second lease: %v, %v", last, err)
	}
	take(last)
	empty, err := task.Claim(ctx, 1, tq.Acking(last))
	if err != nil || empty.Len() != 0 {
		t.Fatalf("claim acking the last lease with nothing ready: %v, %v", empty, err)
	}
	if _, err := task.Claim(ctx, 1, tq.Acking(empty)); err != nil {
		t.Fatalf("claim acking an empty lease: %v", err)
	}
	if w := mustStatus(t, task); w.Acked != 6 || w.Leased != 0 {
		t.Fatalf("after every lease was acked by a claim: %+v, want 6 acked", w)
	}
}

// ackingOtherTask: Acking a lease of another task fails with ErrInvalid
// and acks nothing.
func ackingOtherTask(t *testing.T, e Engine) {
	c := e.Open(t)
	p := "acking-other"
	putRows(t, c, p, []string{"a", "b"}, nil, "x")
	one := mustTask(t, c, p, "one", []string{"x"})
	two := mustTask(t, c, p, "two", []string{"x"})
	l := mustClaim(t, one, 1)
	if _, err := two.Claim(context.Background(), 1, tq.Acking(l)); !errors.Is(err, tq.ErrInvalid) {
		t.Fatalf("acking another task's lease: %v, want ErrInvalid", err)
	}
	if w := mustStatus(t, one); w.Acked != 0 || w.Leased != 1 {
		t.Fatalf("after the refused claim: %+v, want the lease held, nothing acked", w)
	}
}

// ackingLost: rows the acked lease no longer holds (its task was reset)
// do not fail the claim, which leases as usual.
func ackingLost(t *testing.T, e Engine) {
	ctx := context.Background()
	c := e.Open(t)
	p := "acking-lost"
	putRows(t, c, p, []string{"a", "b", "c"}, nil, "x")
	task := mustTask(t, c, p, "w", []string{"x"})
	l := mustClaim(t, task, 1)
	if err := c.ResetConsumption(ctx, p, "w"); err != nil {
		t.Fatal(err)
	}
	next, err := task.Claim(ctx, 3, tq.Acking(l))
	if err != nil || next.Len() != 3 {
		t.Fatalf("claim acking a lease lost to a reset: %v, %v; want the 3 ready rows", next, err)
	}
}
