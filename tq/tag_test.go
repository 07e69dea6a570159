package tq_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/backendtest"
	"github.com/tqgo/tqgo/backends/memory"
	"github.com/tqgo/tqgo/tq"
)

// An invalid tag value fails Put, BatchPut and a tags-only BatchPut before
// any request: the metadata store sees no Prepare or Commit and the data
// store no call at all, on a store that stages and one that does not.
func TestInvalidTagReachesNoEngine(t *testing.T) {
	ctx := context.Background()
	bad := tq.Tag{"step": int64(1), "when": time.Now()}
	puts := map[string]func(c *tq.Client) error{
		"BatchPut stacked": func(c *tq.Client) error {
			return c.BatchPut(ctx, "p", []string{"a", "b"}, tq.Batch{"x": tq.Stacked([]int64{1, 2}, 2)}, []tq.Tag{nil, bad})
		},
		"BatchPut values": func(c *tq.Client) error {
			return c.BatchPut(ctx, "p", []string{"a"}, tq.Batch{"s": tq.Values([]any{"text"})}, []tq.Tag{bad})
		},
		"Put": func(c *tq.Client) error {
			return c.Put(ctx, "p", "a", map[string]any{"s": "text"}, bad)
		},
		"tags only": func(c *tq.Client) error {
			return c.BatchPut(ctx, "p", []string{"a"}, nil, []tq.Tag{bad})
		},
	}
	for name, put := range puts {
		for _, alloc := range []bool{false, true} {
			f := new(backendtest.Faulty)
			meta := newMetaSpy()
			inner := memory.New()
			var data backends.Store = inner // a Stager
			if !alloc {
				data = struct{ backends.Store }{inner} // Write only
			}
			c := engClient(t, backendtest.Wrap(backends.Engine{Data: data, Meta: meta}, f))
			err := put(c)
			var te *tq.TagError
			if !errors.Is(err, tq.ErrInvalid) || !errors.As(err, &te) || te.Tag != "when" {
				t.Errorf("%s (alloc %v): got %v, want ErrInvalid naming tag \"when\"", name, alloc, err)
			}
			if n := meta.prepares.Load() + meta.commits.Load(); n != 0 {
				t.Errorf("%s (alloc %v): %d Prepare/Commit calls", name, alloc, n)
			}
			for _, op := range []backendtest.Op{backendtest.OpWrite, backendtest.OpStage, backendtest.OpDelete} {
				if n := f.Calls(op); n != 0 {
					t.Errorf("%s (alloc %v): %d %v calls", name, alloc, n, op)
				}
			}
		}
	}
}
