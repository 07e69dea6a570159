package tqtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tqgo/tqgo/internal/hook"
	"github.com/tqgo/tqgo/tq"
)

func handBackCases() []testCase {
	return []testCase{
		{"HandBack/WaitEndsAsFilled", handBackWaitEndsAsFilled},
		{"HandBack/DataUnread", handBackDataUnread},
	}
}

// handBackWaitEndsAsFilled: a Wait whose context ends at the moment its
// claim is filled (a hook ends it there, as a record fulfils its
// standing claim) returns
// its context's error, and the rows go back at once, undelivered: another
// consumer claims them long before the lease would end, each with this
// delivery only, none dead under MaxDeliveries(1). (A Wait that woke
// just before, and whose next claim leased the rows as its context
// ended, returns them instead, each delivered once.)
func handBackWaitEndsAsFilled(t *testing.T, e Engine) {
	c, other := e.Open(t), e.Open(t)
	// A name of its own: the hooks below are the process's, and the same
	// test may run on another engine at the same time.
	p := fmt.Sprintf("handback-wait-%x", rand.Uint64())
	opts := []tq.TaskOption{tq.MaxDeliveries(1), tq.LeaseFor(time.Minute)}
	task := mustTask(t, c, p, "w", []string{"a"}, opts...)
	taker := mustTask(t, other, p, "w", []string{"a"}, opts...)
	for round := range 2 {
		keys := []string{fmt.Sprintf("r%d-0", round), fmt.Sprintf("r%d-1", round)}
		ctx, cancel := context.WithCancel(t.Context())
		waiting := make(chan struct{}, 1)
		restoreW := hook.SetWaiting(func(partition string) {
			if partition == p {
				select {
				case waiting <- struct{}{}:
				default:
				}
			}
		})
		restoreS := hook.SetServed(func(partition string) {
			if partition == p {
				cancel()
			}
		})
		type result struct {
			l   *tq.Lease
			err error
		}
		errc := make(chan result, 1)
		go func() {
			l, err := task.Wait(ctx, 2, tq.AtLeast(2))
			errc <- result{l, err}
		}()
		select {
		case <-waiting:
		case r := <-errc:
			t.Fatalf("round %d: Wait returned before waiting: %v, %v", round, r.l, r.err)
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: the Wait never waited", round)
		}
		putRows(t, other, p, keys, nil, "a")
		var r result
		select {
		case r = <-errc:
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: the Wait did not return after its context ended", round)
		}
		restoreS()
		restoreW()
		cancel()
		if r.err == nil {
			// A Wait that woke just before (another record moved the
			// partition) claimed again as the rows came, and that claim
			// leased them as its context ended: the caller has them,
			// each delivered once, the filled claim's lease handed back.
			if !slices.Equal(r.l.Keys(), keys) || !slices.Equal(r.l.Deliveries, []int{1, 1}) {
				t.Fatalf("round %d: Wait ended as its claim was filled: leased %q deliveries %v, want context.Canceled or %q with 1 each",
					round, r.l.Keys(), r.l.Deliveries, keys)
			}
			mustAck(t, r.l)
			continue
		}
		if !errors.Is(r.err, context.Canceled) {
			t.Fatalf("round %d: Wait ended as its claim was filled: %v, want context.Canceled", round, r.err)
		}
		// Back at once: well before the minute's lease would end.
		l := claimSoon(t, taker, 2, 15*time.Second)
		if !slices.Equal(l.Keys(), keys) || !slices.Equal(l.Deliveries, []int{1, 1}) {
			t.Fatalf("round %d: claim after the Wait left: %q deliveries %v, want %q with 1 each", round, l.Keys(), l.Deliveries, keys)
		}
		mustAck(t, l)
		if st := mustStatus(t, taker); st.Dead != 0 {
			t.Fatalf("round %d: %d dead rows, want none", round, st.Dead)
		}
	}
}

// claimSoon claims n rows of task until it leases some, for up to within.
func claimSoon(t *testing.T, task *tq.Task, n int, within time.Duration, opts ...tq.ClaimOption) *tq.Lease {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		l := mustClaim(t, task, n, opts...)
		if l.Len() > 0 {
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("no row came back within %v", within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// handBackDataUnread: a claim WithData whose read fails returns the error
// and hands the rows back undelivered: they are claimable at once, not
// dead under MaxDeliveries(1), with this delivery only.
func handBackDataUnread(t *testing.T, e Engine) {
	c := e.Open(t)
	p := "handback-data"
	keys := keysN(2)
	putRows(t, c, p, keys, nil, "a")
	task := mustTask(t, c, p, "w", []string{"a"}, tq.MaxDeliveries(1), tq.LeaseFor(time.Minute))
	if l, err := task.Claim(t.Context(), 2, tq.WithData("missing")); err == nil {
		t.Fatalf("a claim reading a field the rows lack leased %q with no error", l.Keys())
	}
	l := claimSoon(t, task, 2, 15*time.Second)
	if !slices.Equal(l.Keys(), keys) || !slices.Equal(l.Deliveries, []int{1, 1}) {
		t.Fatalf("claim after the failed read: %q deliveries %v, want %q with 1 each", l.Keys(), l.Deliveries, keys)
	}
	if st := mustStatus(t, task); st.Dead != 0 {
		t.Fatalf("%d dead rows, want none", st.Dead)
	}
	mustAck(t, l)
}
