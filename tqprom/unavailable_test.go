package tqprom_test

import (
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/backendtest"
	"github.com/tqgo/tqgo/tq"
	"github.com/tqgo/tqgo/tqprom"
)

// A request retried after its server was unavailable is counted in
// tq_call_retries_total; a call that gave up is counted as unavailable.
func TestUnavailableAndRetries(t *testing.T) {
	col, reg := registered(t)
	f := new(backendtest.Faulty)
	c := faultyClient(t, f, tq.WithTracer(col), tq.WithRetry(tq.RetryPolicy{Initial: time.Millisecond, Max: time.Millisecond, For: 50 * time.Millisecond}))
	ctx := t.Context()

	f.FailNth(backendtest.OpList, 1, backends.ErrUnavailable)
	if _, err := c.List(ctx, "p"); err != nil {
		t.Fatalf("List after one unavailable request: %v", err)
	}
	compare(t, reg, `
		tq_calls_total{class="ok",op="List"} 1
		tq_call_retries_total{op="List"} 1
	`, "tq_calls_total", "tq_call_retries_total")

	f.FailAll(backendtest.OpList, backends.ErrUnavailable)
	_, err := c.List(ctx, "p")
	if got := tqprom.ErrorClass(err); got != "unavailable" {
		t.Fatalf("List of an engine that stays unavailable: %v, of class %q", err, got)
	}
	if m := sample(t, reg, "tq_calls_total", "op", "List", "class", "unavailable"); m.GetCounter().GetValue() != 1 {
		t.Errorf("tq_calls_total{op=List,class=unavailable} = %v, want 1", m.GetCounter())
	}
	if m := sample(t, reg, "tq_call_retries_total", "op", "List"); m.GetCounter().GetValue() < 2 {
		t.Errorf("tq_call_retries_total{op=List} = %v, want the first call's 1 and the second's", m.GetCounter())
	}
}

// Rows delivered again after a lease ended without an ack are reported
// per watched task.
func TestWatchRedelivered(t *testing.T) {
	col, reg, c := setup(t)
	ctx := t.Context()
	putRows(t, c, "p", 3, 0)
	task, err := c.Task("p", "t", []string{"x"})
	if err != nil {
		t.Fatal(err)
	}
	l, err := task.Claim(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Nack(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := col.Watch(c, "p", "t", "idle"); err != nil {
		t.Fatal(err)
	}
	compare(t, reg, `
		tq_task_redelivered_rows{partition="p",task="idle"} 0
		tq_task_redelivered_rows{partition="p",task="t"} 2
	`, "tq_task_redelivered_rows")
	l, err = task.Claim(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	compare(t, reg, `
		tq_task_leases{partition="p",task="idle"} 0
		tq_task_leases{partition="p",task="t"} 1
	`, "tq_task_leases")
	if err := l.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	compare(t, reg, `
		tq_task_redelivered_rows{partition="p",task="idle"} 0
		tq_task_redelivered_rows{partition="p",task="t"} 0
	`, "tq_task_redelivered_rows")
}
