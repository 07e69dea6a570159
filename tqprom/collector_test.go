package tqprom_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tqgo/tqgo/tq"
	"github.com/tqgo/tqgo/tqprom"
)

// Put 3 rows, claim 2, ack them: the call counters say so exactly.
func TestCallsCounted(t *testing.T) {
	col, reg := registered(t)
	rec := &recorder{Collector: col, ends: map[string]tq.CallEnd{}}
	c, err := tq.Open(t.Context(), "memory://", tq.WithTracer(rec))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
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
	if err := l.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.BatchGet(ctx, "p", []string{"k0", "k1", "k2"}, "x"); err != nil {
		t.Fatal(err)
	}

	compare(t, reg, `
		tq_calls_total{class="ok",op="Ack"} 1
		tq_calls_total{class="ok",op="BatchGet"} 1
		tq_calls_total{class="ok",op="BatchPut"} 1
		tq_calls_total{class="ok",op="Claim"} 1
		tq_call_rows_total{op="Ack"} 2
		tq_call_rows_total{op="BatchGet"} 3
		tq_call_rows_total{op="BatchPut"} 3
		tq_call_rows_total{op="Claim"} 2
		tq_call_cells_total{op="Ack"} 0
		tq_call_cells_total{op="BatchGet"} 3
		tq_call_cells_total{op="BatchPut"} 3
		tq_call_cells_total{op="Claim"} 0
		tq_call_round_trips_total{op="Ack"} 0
		tq_call_round_trips_total{op="BatchGet"} 0
		tq_call_round_trips_total{op="BatchPut"} 0
		tq_call_round_trips_total{op="Claim"} 0
	`, "tq_calls_total", "tq_call_rows_total", "tq_call_cells_total", "tq_call_round_trips_total")

	// Bytes: what the calls reported, which is not nothing.
	for _, op := range []string{"BatchPut", "BatchGet"} {
		want := rec.ends[op].Bytes
		m := sample(t, reg, "tq_call_bytes_total", "op", op)
		if want <= 0 || m == nil || m.GetCounter().GetValue() != float64(want) {
			t.Errorf("tq_call_bytes_total{op=%q} = %v, want the %d bytes the call reported", op, m.GetCounter(), want)
		}
	}
	// One latency observation per call, in seconds.
	for _, op := range []string{"BatchPut", "Claim", "Ack", "BatchGet"} {
		m := sample(t, reg, "tq_call_duration_seconds", "op", op)
		if h := m.GetHistogram(); h.GetSampleCount() != 1 || h.GetSampleSum() <= 0 || h.GetSampleSum() > 10 {
			t.Errorf("tq_call_duration_seconds{op=%q}: count %d sum %v, want 1 call of some seconds", op, h.GetSampleCount(), h.GetSampleSum())
		}
		if n := len(m.GetHistogram().GetBucket()); n != len(tqprom.DefaultBuckets) {
			t.Errorf("tq_call_duration_seconds{op=%q}: %d buckets, want %d", op, n, len(tqprom.DefaultBuckets))
		}
	}
}

// Each failed call is counted once, in its op and its class.
func TestErrorClasses(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	cases := []struct {
		name, op, class string
		call            func(ctx context.Context, c *tq.Client) error
	}{
		{"not found", "BatchGet", "not_found", func(ctx context.Context, c *tq.Client) error {
			_, err := c.BatchGet(ctx, "p", []string{"nope"}, "x")
			return err
		}},
		{"not ready", "BatchGet", "not_ready", func(ctx context.Context, c *tq.Client) error {
			_, err := c.BatchGet(ctx, "p", []string{"k0"}, "y")
			return err
		}},
		{"invalid", "BatchPut", "invalid", func(ctx context.Context, c *tq.Client) error {
			return c.BatchPut(ctx, "p", []string{"a", "b"}, tq.Batch{"x": tq.Stacked([]float32{1})}, nil)
		}},
		{"canceled", "List", "canceled", func(_ context.Context, c *tq.Client) error {
			_, err := c.List(canceled, "p")
			return err
		}},
		{"lease lost", "Ack", "lease_lost", func(ctx context.Context, c *tq.Client) error {
			task, err := c.Task("p", "t", []string{"x"})
			if err != nil {
				return err
			}
			l, err := task.Claim(ctx, 1)
			if err != nil {
				return err
			}
			if err := c.ResetConsumption(ctx, "p", "t"); err != nil {
				return err
			}
			return l.Ack(ctx)
		}},
		{"closed", "List", "closed", func(ctx context.Context, c *tq.Client) error {
			if err := c.Close(); err != nil {
				return err
			}
			_, err := c.List(ctx, "p")
			return err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, reg, c := setup(t)
			putRows(t, c, "p", 3, 0)
			err := tc.call(t.Context(), c)
			if got := tqprom.ErrorClass(err); got != tc.class {
				t.Fatalf("the call returned %v, of class %q; the case wants %q", err, got, tc.class)
			}
			m := sample(t, reg, "tq_calls_total", "op", tc.op, "class", tc.class)
			if m.GetCounter().GetValue() != 1 {
				t.Errorf("tq_calls_total{op=%q,class=%q} = %v, want 1", tc.op, tc.class, m.GetCounter())
			}
			var failed float64
			for _, m := range family(t, reg, "tq_calls_total").GetMetric() {
				if labelOf(m, "class") != "ok" {
					failed += m.GetCounter().GetValue()
				}
			}
			if failed != 1 {
				t.Errorf("%v failed calls counted, want 1", failed)
			}
		})
	}
}

func TestErrorClass(t *testing.T) {
	cases := []struct {
		err  error
		want string
	}{
		{nil, "ok"},
		{tq.ErrNotFound, "not_found"},
		{&tq.KeyError{Partition: "p", Key: "k", Err: tq.ErrNotFound}, "not_found"},
		{tq.ErrNotReady, "not_ready"},
		{tq.ErrInvalid, "invalid"},
		{tq.ErrConflict, "conflict"},
		{tq.ErrLeaseLost, "lease_lost"},
		{&tq.LeaseLostError{Op: "ack", Keys: []string{"k"}}, "lease_lost"},
		{tq.ErrClosed, "closed"},
		{context.Canceled, "canceled"},
		{context.DeadlineExceeded, "canceled"},
		// A write whose outcome is unknown because its context ended is
		// counted as outcome_unknown, the thing its caller must act on.
		{errors.Join(tq.ErrOutcomeUnknown, context.DeadlineExceeded), "outcome_unknown"},
		{errors.New("something else"), "other"},
	}
	for _, tc := range cases {
		if got := tqprom.ErrorClass(tc.err); got != tc.want {
			t.Errorf("ErrorClass(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

// An op tq adds later is counted as "other", so op stays a fixed set.
func TestUnknownOp(t *testing.T) {
	col, reg, c := setup(t)
	col.TraceEnd(t.Context(), c, tq.Call{Op: "Frobnicate", Partition: "p"}, tq.CallEnd{Rows: 4, Duration: time.Millisecond})
	compare(t, reg, `
		tq_calls_total{class="ok",op="other"} 1
		tq_call_rows_total{op="other"} 4
	`, "tq_calls_total", "tq_call_rows_total")
}

func TestNewRejectsBadOptions(t *testing.T) {
	for name, opt := range map[string]tqprom.Option{
		"zero timeout":     tqprom.WithScrapeTimeout(0),
		"zero limit":       tqprom.WithWatchLimit(0),
		"no buckets":       tqprom.WithBuckets(),
		"unsorted buckets": tqprom.WithBuckets(1, 0.5),
		"repeated bucket":  tqprom.WithBuckets(1, 1),
		"negative bucket":  tqprom.WithBuckets(-1, 1),
	} {
		if _, err := tqprom.New(opt); !errors.Is(err, tqprom.ErrInvalid) {
			t.Errorf("%s: New returned %v, want ErrInvalid", name, err)
		}
	}
	col, err := tqprom.New(tqprom.WithBuckets(0.1, 1))
	if err != nil {
		t.Fatal(err)
	}
	col.TraceEnd(t.Context(), nil, tq.Call{Op: "List"}, tq.CallEnd{Duration: 2 * time.Second})
	if n := testutil.CollectAndCount(col, "tq_call_duration_seconds"); n != 1 {
		t.Errorf("%d histograms, want 1", n)
	}
}
