package tqtest

import (
	"testing"
	"time"

	"github.com/tqgo/tqgo/tq"
)

// grantedCases: when a lease was granted, beside when it ends.
func grantedCases() []testCase {
	return []testCase{
		{"Granted/ClaimExtendAck", grantedClaimExtendAck},
	}
}

// grantedClaimExtendAck: a lease's grant time is the time of its claim,
// the same in the Lease, in the rows' consumption and in the task's
// leases; an Extend moves Until and keeps it; a row acked has none.
func grantedClaimExtendAck(t *testing.T, e Engine) {
	ctx := t.Context()
	c := e.Open(t)
	p := "granted"
	putRows(t, c, p, []string{"a", "b", "c"}, nil, "x")
	task := mustTask(t, c, p, "w", []string{"x"}, tq.LeaseFor(time.Minute))
	before := time.Now()
	l := mustClaim(t, task, 2)
	after := time.Now()
	g := l.Granted()
	// The engine's clock stands in: a server's, taken to this process's.
	const slack = time.Second
	if l.Len() != 2 || g.Before(before.Add(-slack)) || g.After(after.Add(slack)) {
		t.Fatalf("a claim made between %v and %v granted at %v (%d rows)", before, after, g, l.Len())
	}
	near := func(a, b time.Time) bool { return a.Sub(b).Abs() <= 50*time.Millisecond }
	check := func(when string, want time.Time) {
		t.Helper()
		ks, err := task.Consumption(ctx, l.Keys()...)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range ks {
			s := k.Tasks["w"]
			if want.IsZero() != s.Granted.IsZero() || !want.IsZero() && !near(s.Granted, want) {
				t.Fatalf("%s: %s granted at %v, want %v", when, k.Key, s.Granted, want)
			}
		}
		st := mustStatus(t, task)
		if want.IsZero() {
			if len(st.Leases) != 0 {
				t.Fatalf("%s: leases %+v, want none", when, st.Leases)
			}
			return
		}
		if len(st.Leases) != 1 || !near(st.Leases[0].Granted, want) {
			t.Fatalf("%s: leases %+v, want one granted at %v", when, st.Leases, want)
		}
	}
	check("claimed", g)
	until := l.Until()
	time.Sleep(5 * time.Millisecond) // an Extend made later ends later
	if err := l.Extend(ctx, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if !l.Until().After(until) {
		t.Fatalf("Extend: until %v, was %v", l.Until(), until)
	}
	check("extended", g)
	if err := l.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	check("acked", time.Time{})
}
