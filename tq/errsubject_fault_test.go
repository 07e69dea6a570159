package tq_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/backendtest"
	"github.com/tqgo/tqgo/tq"
)

// An engine's failure, returned by a call, names the call's partition.
func TestEngineErrorsNameTheirPartition(t *testing.T) {
	ctx := t.Context()
	one := tq.Batch{"a": tq.JaggedOf([][]float32{{1}})}
	for _, tc := range []struct {
		name     string
		op       backendtest.Op
		inject   error
		sentinel error
		call     func(c *tq.Client) error
	}{
		{"Unavailable", backendtest.OpLookup, backends.ErrUnavailable, tq.ErrUnavailable, func(c *tq.Client) error {
			_, err := c.BatchGet(ctx, "part-x", []string{"k0"}, "a")
			return err
		}},
		{"OutcomeUnknown", backendtest.OpCommit, backends.ErrOutcomeUnknown, tq.ErrOutcomeUnknown, func(c *tq.Client) error {
			return c.BatchPut(ctx, "part-x", []string{"k1"}, one, nil)
		}},
		{"Conflict", backendtest.OpCommit, backends.ErrConflict, tq.ErrConflict, func(c *tq.Client) error {
			return c.BatchPut(ctx, "part-x", []string{"k1"}, one, nil)
		}},
		{"Corrupt", backendtest.OpLookup, backends.ErrCorrupt, tq.ErrCorrupt, func(c *tq.Client) error {
			_, err := c.BatchGet(ctx, "part-x", []string{"k0"}, "a")
			return err
		}},
	} {
		f := new(backendtest.Faulty)
		c := faultyClient(t, f, tq.WithRetry(tq.NoRetry), tq.Quiet())
		if err := c.BatchPut(ctx, "part-x", []string{"k0"}, one, nil); err != nil {
			t.Fatal(err)
		}
		f.FailAll(tc.op, tc.inject)
		err := tc.call(c)
		if !errors.Is(err, tc.sentinel) {
			t.Errorf("%s: %v, want an error matching %v", tc.name, err, tc.sentinel)
			continue
		}
		if !strings.Contains(err.Error(), `"part-x"`) {
			t.Errorf("%s: %q does not name the partition", tc.name, err.Error())
		}
	}
}
