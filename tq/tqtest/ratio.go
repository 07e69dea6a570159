package tqtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tqgo/tqgo/tq"
)

// ratioCases: the sample-to-insert rate limiter, on every engine.
func ratioCases() []testCase {
	return []testCase{
		{"Ratio/InsertWaitsForSamples", ratioInsert},
		{"Ratio/SampleWaitsForMinSize", ratioSample},
		{"Ratio/Invalid", ratioInvalid},
	}
}

// ratioInsert: a producer past MinSize + ErrorBuffer waits until the
// task's acknowledgements (from another client) bring the ratio back,
// and is woken by them.
func ratioInsert(t *testing.T, e Engine) {
	prod, cons := e.Open(t), e.Open(t)
	p := "ratio-insert"
	r := tq.Ratio{SamplesPerInsert: 1, MinSize: 2, ErrorBuffer: 1}
	ctx := t.Context()
	for i, k := range []string{"k0", "k1", "k2"} {
		if err := prod.AwaitInsert(ctx, p, "train", r, 1); err != nil {
			t.Fatalf("insert %d within the ratio: %v", i, err)
		}
		putRows(t, prod, p, []string{k}, nil, "x")
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	err := prod.AwaitInsert(short, p, "train", r, 1)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a fourth insert with nothing sampled: %v, want DeadlineExceeded", err)
	}
	done := make(chan error, 1)
	go func() { done <- prod.AwaitInsert(ctx, p, "train", r, 1) }()
	if err := cons.AwaitSample(ctx, p, "train", r, 1); err != nil {
		t.Fatalf("a sample past MinSize: %v", err)
	}
	task := mustTask(t, cons, p, "train", []string{"x"})
	l := mustClaim(t, task, 1)
	select {
	case err := <-done:
		t.Fatalf("insert returned %v before any sample was acknowledged", err)
	case <-time.After(50 * time.Millisecond):
	}
	mustAck(t, l)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("insert after a sample: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an acknowledgement did not wake the waiting producer")
	}
}

// ratioSample: a consumer waits until MinSize rows were inserted.
func ratioSample(t *testing.T, e Engine) {
	prod, cons := e.Open(t), e.Open(t)
	p := "ratio-sample"
	r := tq.Ratio{SamplesPerInsert: 1, MinSize: 2, ErrorBuffer: 2}
	putRows(t, prod, p, []string{"k0"}, nil, "x")
	done := make(chan error, 1)
	go func() { done <- cons.AwaitSample(t.Context(), p, "train", r, 1) }()
	select {
	case err := <-done:
		t.Fatalf("a sample below MinSize: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	putRows(t, prod, p, []string{"k1"}, nil, "x")
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("a sample at MinSize: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the insert reaching MinSize did not wake the consumer")
	}
}

func ratioInvalid(t *testing.T, e Engine) {
	c := e.Open(t)
	for _, r := range []tq.Ratio{{SamplesPerInsert: 0}, {SamplesPerInsert: 1.5}, {SamplesPerInsert: 1, MinSize: -1}, {SamplesPerInsert: 1, ErrorBuffer: -1}} {
		if err := c.AwaitInsert(t.Context(), "ratio-bad", "train", r, 1); !errors.Is(err, tq.ErrInvalid) {
			t.Errorf("AwaitInsert(%+v): %v, want ErrInvalid", r, err)
		}
	}
	if err := c.AwaitSample(t.Context(), "ratio-bad", "train", tq.Ratio{SamplesPerInsert: 1}, 0); !errors.Is(err, tq.ErrInvalid) {
		t.Errorf("AwaitSample of 0 rows: %v, want ErrInvalid", err)
	}
}
