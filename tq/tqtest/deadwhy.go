package tqtest

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tqgo/tqgo/tq"
)

// deadWhyCases: a dead row keeps why it died (its last error and when),
// whoever gave it: a NackErr, a lease that ended, a Consume handler.
func deadWhyCases() []testCase {
	return []testCase{
		{"DeadWhy/NackErr", deadWhyNack},
		{"DeadWhy/LeaseEnded", deadWhyLeaseEnded},
		{"DeadWhy/Consume", deadWhyConsume},
		{"DeadWhy/Status", deadWhyStatus},
	}
}

// deadRow returns the dead row of key, failing when there is none.
func deadRow(t *testing.T, task *tq.Task, key string) tq.DeadRow {
	t.Helper()
	dead, err := task.Dead(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dead {
		if d.Key == key {
			return d
		}
	}
	t.Fatalf("no dead row %s among %+v", key, dead)
	return tq.DeadRow{}
}

func deadWhyNack(t *testing.T, e Engine) {
	c := e.Open(t)
	p := "deadwhy-nack"
	keys := keysN(2)
	putRows(t, c, p, keys, nil, "a")
	task := mustTask(t, c, p, "w", []string{"a"}, tq.MaxDeliveries(2), tq.LeaseFor(time.Minute))
	before := time.Now()
	l := mustClaim(t, task, 2)
	if err := l.NackErr(t.Context(), 0, errors.New("boom 1")); err != nil {
		t.Fatal(err)
	}
	// The reason shows while the row waits for its next delivery, and
	// stays through it.
	ks, err := task.Consumption(t.Context(), keys[0])
	if err != nil {
		t.Fatal(err)
	}
	if s := ks[0].Tasks["w"]; s.State != tq.StateReady || s.Reason != "boom 1" || s.At.IsZero() {
		t.Fatalf("%s after NackErr(boom 1): %+v, want ready with its reason", keys[0], s)
	}
	l = mustClaim(t, task, 2)
	if ks, err = task.Consumption(t.Context(), keys[0]); err != nil {
		t.Fatal(err)
	}
	if s := ks[0].Tasks["w"]; s.State != tq.StateLeased || s.Reason != "boom 1" {
		t.Fatalf("%s leased again: %+v, want its last reason kept", keys[0], s)
	}
	long := strings.Repeat("é", tq.MaxReason) // 2 bytes each: cut at a rune's start
	if err := l.NackErr(t.Context(), 0, errors.New("boom 2"), keys[0]); err != nil {
		t.Fatal(err)
	}
	if err := l.NackErr(t.Context(), 0, errors.New(long), keys[1]); err != nil {
		t.Fatal(err)
	}
	d := deadRow(t, task, keys[0])
	if d.Reason != "boom 2" || d.Deliveries != 2 || d.At.Before(before.Add(-time.Minute)) || d.At.After(time.Now().Add(time.Minute)) {
		t.Fatalf("dead row %+v, want reason boom 2 at about now", d)
	}
	d1 := deadRow(t, task, keys[1])
	if len(d1.Reason) > tq.MaxReason || len(d1.Reason) < tq.MaxReason-1 || !utf8.ValidString(d1.Reason) || !strings.HasPrefix(long, d1.Reason) {
		t.Fatalf("a reason of %d bytes kept as %d bytes (valid %v), want cut to %d at a rune's start", len(long), len(d1.Reason), utf8.ValidString(d1.Reason), tq.MaxReason)
	}
	// A Retry clears it: the row is new to the task again.
	if err := task.Retry(t.Context(), keys[0]); err != nil {
		t.Fatal(err)
	}
	if ks, err = task.Consumption(t.Context(), keys[0]); err != nil {
		t.Fatal(err)
	}
	if s := ks[0].Tasks["w"]; s.State != tq.StateReady || s.Reason != "" || !s.At.IsZero() {
		t.Fatalf("%s after Retry: %+v, want ready with no reason", keys[0], s)
	}
	// An ack clears it too.
	l = mustClaim(t, task, 2)
	if err := l.NackErr(t.Context(), 0, errors.New("boom 3")); err != nil {
		t.Fatal(err)
	}
	l = mustClaim(t, task, 2)
	if err := l.Ack(t.Context()); err != nil {
		t.Fatal(err)
	}
	if ks, err = task.Consumption(t.Context(), keys[0]); err != nil {
		t.Fatal(err)
	}
	if s := ks[0].Tasks["w"]; s.State != tq.StateAcked || s.Reason != "" {
		t.Fatalf("%s acked: %+v, want no reason", keys[0], s)
	}
}

func deadWhyLeaseEnded(t *testing.T, e Engine) {
	c := e.Open(t)
	p := "deadwhy-lease"
	keys := keysN(1)
	putRows(t, c, p, keys, nil, "a")
	const lease = 50 * time.Millisecond
	task := mustTask(t, c, p, "w", []string{"a"}, tq.MaxDeliveries(1), tq.LeaseFor(lease))
	l := mustClaim(t, task, 1)
	until := l.Until()
	// Wait out the lease (under load the engine's clock may lag ours).
	deadline := time.Now().Add(30 * time.Second)
	for {
		dead, err := task.Dead(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if len(dead) == 1 {
			d := dead[0]
			if d.Reason != "lease ended" || d.At.IsZero() || d.At.Sub(until).Abs() > 10*time.Second {
				t.Fatalf("row dead after its lease ended: %+v, want reason %q at its lease's end %v", d, "lease ended", until)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no dead row 30s after a lease of %v ended", lease)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func deadWhyConsume(t *testing.T, e Engine) {
	c := e.Open(t)
	p := "deadwhy-consume"
	keys := keysN(2)
	putRows(t, c, p, keys, nil, "a")
	task := mustTask(t, c, p, "w", []string{"a"}, tq.MaxDeliveries(1), tq.LeaseFor(time.Minute))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var calls atomic.Int32
	done := make(chan error, 1)
	go func() {
		done <- task.Consume(ctx, 1, func(ctx context.Context, l *tq.Lease) error {
			if calls.Add(1) == 2 {
				panic("handler blew up")
			}
			return errors.New("handler failed: bad row")
		})
	}()
	// Both rows die on their one delivery; then Consume stops.
	deadline := time.Now().Add(30 * time.Second)
	for {
		dead, err := task.Dead(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if len(dead) == 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	dead, err := task.Dead(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 2 {
		t.Fatalf("dead rows %+v, want both", dead)
	}
	if dead[0].Reason != "handler failed: bad row" && dead[1].Reason != "handler failed: bad row" {
		t.Fatalf("dead rows %+v: want the handler's error as one's reason", dead)
	}
	if !strings.Contains(dead[0].Reason+dead[1].Reason, "handler blew up") {
		t.Fatalf("dead rows %+v: want the panic's value in one's reason", dead)
	}
}

// deadWhyStatus: Status tells how many dead rows died of their lease's
// end, and which row died last and why.
func deadWhyStatus(t *testing.T, e Engine) {
	c := e.Open(t)
	p := "deadwhy-status"
	putRows(t, c, p, []string{"k0", "k1"}, nil, "a")
	const lease = 50 * time.Millisecond
	task := mustTask(t, c, p, "w", []string{"a"}, tq.MaxDeliveries(1), tq.LeaseFor(lease))
	if st := mustStatus(t, task); st.Dead != 0 || st.DeadLeaseEnded != 0 || st.LastDead != nil {
		t.Fatalf("no dead row yet: %+v", st)
	}
	l := mustClaim(t, task, 1) // k0: its lease ends
	deadline := time.Now().Add(30 * time.Second)
	for len(mustDead(t, task)) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no dead row 30s after a lease of %v ended", lease)
		}
		time.Sleep(20 * time.Millisecond)
	}
	st := mustStatus(t, task)
	if st.Dead != 1 || st.DeadLeaseEnded != 1 || st.LastDead == nil || st.LastDead.Key != l.Keys()[0] || st.LastDead.Reason != "lease ended" {
		t.Fatalf("after a lease ended: %+v (last dead %+v), want 1 dead of its lease's end, %s", st, st.LastDead, l.Keys()[0])
	}
	time.Sleep(5 * time.Millisecond)                                                             // the nack's time is later than the lease's end
	slow := mustTask(t, c, p, "w", []string{"a"}, tq.MaxDeliveries(1), tq.LeaseFor(time.Minute)) // no lease ends under load
	l2 := mustClaim(t, slow, 1)
	if l2.Len() != 1 {
		t.Fatalf("claim of the other row: %v", l2)
	}
	if err := l2.NackErr(t.Context(), 0, errors.New("bad row")); err != nil {
		t.Fatal(err)
	}
	st = mustStatus(t, task)
	if st.Dead != 2 || st.DeadLeaseEnded != 1 || st.LastDead == nil || st.LastDead.Key != l2.Keys()[0] ||
		!strings.Contains(st.LastDead.Reason, "bad row") || st.LastDead.Deliveries != 1 || st.LastDead.At.IsZero() {
		t.Fatalf("after a nack: %+v (last dead %+v), want 2 dead, 1 of its lease's end, the last %s for %q", st, st.LastDead, l2.Keys()[0], "bad row")
	}
	all := mustStatusOf(t, c, p).Tasks["w"]
	if all.Dead != 2 || all.DeadLeaseEnded != 1 || all.LastDead == nil || all.LastDead.Key != l2.Keys()[0] {
		t.Fatalf("Client.Status: %+v, want the task's as Task.Status tells it", all)
	}
}

func mustDead(t *testing.T, task *tq.Task) []tq.DeadRow {
	t.Helper()
	dead, err := task.Dead(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return dead
}
