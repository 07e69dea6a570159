package redis_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/tqgo/tqgo/internal/redisserver"
	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/tq"
)

// A server at its maxmemory with noeviction (the policy a queue needs:
// any other evicts unconsumed cells) refuses writes: a put fails with an
// error matching tq.ErrFull, leaving no row, and the queue works again
// once rows are cleared.
func TestServerOutOfMemory(t *testing.T) {
	srv := redistest.Start(t, redisserver.Options{Args: []string{"--maxmemory", "4mb", "--maxmemory-policy", "noeviction"}})
	c := openTQ(t, srv.URL())
	ctx := t.Context()
	row := tq.Batch{"x": tq.Stacked(make([]byte, 256<<10), 1, 256<<10)}
	var err error
	var put []string
	for i := 0; i < 200 && err == nil; i++ {
		k := fmt.Sprint("k", i)
		if err = c.BatchPut(ctx, "p", []string{k}, row, nil); err == nil {
			put = append(put, k)
		}
	}
	if !errors.Is(err, tq.ErrFull) {
		t.Fatalf("puts past maxmemory: %v, want an error matching tq.ErrFull", err)
	}
	m, lerr := c.List(ctx, "p")
	if lerr != nil {
		t.Fatal(lerr)
	}
	if len(m.Rows) != len(put) {
		t.Errorf("%d rows listed, %d puts succeeded: the refused put left a row", len(m.Rows), len(put))
	}
	if err := c.ClearPartition(ctx, "p"); err != nil {
		t.Fatalf("clear at maxmemory: %v", err)
	}
	if err := c.BatchPut(ctx, "p", []string{"again"}, row, nil); err != nil {
		t.Errorf("put after clearing: %v", err)
	}
}
