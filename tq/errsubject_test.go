package tq_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tqgo/tqgo/tq"
)

// Each public error, provoked by a real call on memory://, names what it
// is about (the partition, task, key or field involved) and, where there
// is one, the fix.
func TestErrorsNameTheirSubject(t *testing.T) {
	ctx := t.Context()
	c := openURL(t, "memory://")
	putA(t, c, "p", []string{"k0", "k1"})
	if err := c.BatchPut(ctx, "p", []string{"half"}, tq.Batch{"a": tq.JaggedOf([][]float32{{1}})}, nil); err != nil {
		t.Fatal(err)
	}
	b, err := c.BatchGet(ctx, "p", []string{"k0"}, "a")
	if err != nil {
		t.Fatal(err)
	}
	tk := task(t, c, "p", "work", tq.LeaseFor(tq.MinLease))
	l, err := tk.Claim(ctx, 1)
	if err != nil || l.Len() != 1 {
		t.Fatalf("claim: %v, %d rows", err, l.Len())
	}
	held := l.Keys()[0]
	if err := c.ResetConsumption(ctx, "p", "work"); err != nil {
		t.Fatal(err)
	}
	full := openURL(t, "memory://")
	if err := full.SetCapacity(ctx, "small", tq.Capacity{Rows: 1}); err != nil {
		t.Fatal(err)
	}
	putA(t, full, "small", []string{"only"})
	closed, err := tq.Open(ctx, "memory://", tq.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	if err := closed.Close(); err != nil {
		t.Fatal(err)
	}
	stallCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()

	for _, tc := range []struct {
		name     string
		sentinel error
		call     func() error
		subject  []string // every one must be in the message
	}{
		{"NotFound", tq.ErrNotFound, func() error {
			_, err := c.BatchGet(ctx, "p", []string{"nokey"}, "a")
			return err
		}, []string{`"p"`, `"nokey"`}},
		{"NotReady", tq.ErrNotReady, func() error {
			_, err := c.BatchGet(ctx, "p", []string{"k0"}, "a", "b")
			return err
		}, []string{`"p"`, `"k0"`, `"b"`}},
		{"NoField", tq.ErrNoField, func() error {
			_, err := b.Column("typo")
			return err
		}, []string{`"typo"`, `"a"`}},
		{"Type", tq.ErrType, func() error {
			_, err := tq.As[int64](b["a"])
			return err
		}, []string{"int64", "float32"}},
		{"Invalid partition", tq.ErrInvalid, func() error {
			return c.BatchPut(ctx, "", []string{"x"}, tq.Batch{"a": tq.JaggedOf([][]float32{{1}})}, nil)
		}, []string{"partition"}},
		{"Invalid lengths", tq.ErrInvalid, func() error {
			return c.BatchPut(ctx, "p", []string{"x", "y"}, tq.Batch{"a": tq.JaggedOf([][]float32{{1}})}, nil)
		}, []string{`"p"`, `"a"`}},
		{"Invalid task", tq.ErrInvalid, func() error {
			_, err := c.Task("p", "work", nil)
			return err
		}, []string{`"p"`, `"work"`, "field"}},
		{"Invalid empty task name", tq.ErrInvalid, func() error {
			_, err := c.Task("p", "", []string{"a"})
			return err
		}, []string{`"p"`, "task"}},
		{"Invalid task option", tq.ErrInvalid, func() error {
			_, err := c.Task("p", "work", []string{"a"}, tq.MaxDeliveries(-1))
			return err
		}, []string{`"p"`, `"work"`, "-1"}},
		{"Invalid claim", tq.ErrInvalid, func() error {
			_, err := tk.Claim(ctx, 0)
			return err
		}, []string{`"p"`, `"work"`, "0"}},
		{"Invalid duplicate key", tq.ErrInvalid, func() error {
			_, err := c.BatchGet(ctx, "p", []string{"k0", "k0"}, "a")
			return err
		}, []string{`"p"`, `"k0"`}},
		{"Invalid key not leased", tq.ErrInvalid, func() error {
			return l.Nack(ctx, 0, "stranger")
		}, []string{`"p"`, `"work"`, `"stranger"`, "Lease.Keys"}},
		{"Closed", tq.ErrClosed, func() error {
			_, err := closed.BatchGet(ctx, "p", []string{"k0"})
			return err
		}, []string{"BatchGet", `"p"`}},
		{"Full", tq.ErrFull, func() error {
			return full.BatchPut(tq.WhenFull(ctx, tq.Fail), "small", []string{"more"}, tq.Batch{"a": tq.JaggedOf([][]float32{{1}})}, nil)
		}, []string{`"small"`, "1"}},
		{"LeaseLost", tq.ErrLeaseLost, func() error {
			return l.Ack(ctx)
		}, []string{`"p"`, `"work"`, `"` + held + `"`, "lease"}},
		{"Stalled", tq.ErrStalled, func() error {
			stf, err := c.Task("p", "starved2", []string{"a", "b"}, tq.Stall(50*time.Millisecond))
			if err != nil {
				return err
			}
			_, err = stf.Wait(stallCtx, 5)
			return err
		}, []string{"p/starved2", "lacking b"}},
	} {
		err := tc.call()
		if !errors.Is(err, tc.sentinel) {
			t.Errorf("%s: %v, want an error matching %v", tc.name, err, tc.sentinel)
			continue
		}
		for _, s := range tc.subject {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: %q does not name %s", tc.name, err.Error(), s)
			}
		}
	}
}
