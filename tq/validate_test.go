package tq_test

import (
	"context"
	"errors"
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
