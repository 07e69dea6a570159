package tq_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/tqgo/tqgo/tq"
)

// A field name must leave room in a 255-byte storage key for the index and
// generation, so 200 bytes pass and 201 fail before anything is written.
func TestFieldNameLengthLimit(t *testing.T) {
	ctx := context.Background()
	c, err := tq.Open(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ok := strings.Repeat("f", 200)
	if err := c.BatchPut(ctx, "p", []string{"k"}, tq.Batch{ok: tq.Stacked([]int32{1})}, nil); err != nil {
		t.Fatalf("200-byte field: %v", err)
	}
	long := ok + "g"
	err = c.BatchPut(ctx, "p", []string{"k2"}, tq.Batch{long: tq.Stacked([]int32{1})}, nil)
	if !errors.Is(err, tq.ErrInvalid) {
		t.Fatalf("201-byte field: got %v, want ErrInvalid", err)
	}
	if m, _ := c.List(ctx, "p"); len(m.Rows) != 1 {
		t.Fatalf("rows after rejected put: %d, want 1", len(m.Rows))
	}
}

// Keys must be unique and non-empty in batches of every size; the error
// names the first offending key.
func TestKeyChecksInLargeBatches(t *testing.T) {
	ctx := context.Background()
	c, err := tq.Open(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, n := range []int{1, 2, 3, 17, 1000} {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("n%d-k%d", n, i)
		}
		col := func() tq.Batch { return tq.Batch{"x": tq.Stacked(make([]int32, n))} }
		if err := c.BatchPut(ctx, "p", keys, col(), nil); err != nil {
			t.Fatalf("%d unique keys: %v", n, err)
		}
		if _, err := c.BatchGet(ctx, "p", keys); err != nil {
			t.Fatalf("get of %d unique keys: %v", n, err)
		}
		if n < 2 {
			continue
		}
		dup := slices.Clone(keys)
		dup[n-1] = keys[(n-1)/2]
		if err := c.BatchPut(ctx, "p", dup, col(), nil); !errors.Is(err, tq.ErrInvalid) || !strings.Contains(err.Error(), fmt.Sprintf("%q appears twice", keys[(n-1)/2])) {
			t.Fatalf("%d keys, one twice: %v", n, err)
		}
		if _, err := c.BatchGet(ctx, "p", dup); !errors.Is(err, tq.ErrInvalid) {
			t.Fatalf("get of %d keys, one twice: %v", n, err)
		}
		empty := slices.Clone(keys)
		empty[n-1] = ""
		if err := c.BatchPut(ctx, "p", empty, col(), nil); !errors.Is(err, tq.ErrInvalid) || !strings.Contains(err.Error(), fmt.Sprintf("key %d is empty", n-1)) {
			t.Fatalf("%d keys, one empty: %v", n, err)
		}
	}
}
