package tqserve_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/tqgo/tqgo/tq"
	"github.com/tqgo/tqgo/tqserve"
)

// Through a tq server on Redis, with WithIndexBlocks a put of new keys
// is its cells (straight to Redis) and one call, PutNew: two round trips
// where Prepare, the cells and Commit are three. The blocks are reserved
// in the background, Block calls of their own.
func TestPutNewTwoRoundTrips(t *testing.T) {
	url := engines(t)["redis"](t)
	cc := &callCounter{n: map[string]int{}}
	s := startServer(t, url, tqserve.WithInterceptor(cc.intercept))
	ctx := context.Background()
	c, err := tq.Open(ctx, s.URL, tq.Quiet(), tq.WithIndexBlocks())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	const n = 8
	batch := func(round int) ([]string, tq.Batch) {
		keys := make([]string, n)
		ids := make([]int64, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("r%d/s%d", round, i)
			ids[i] = int64(round*n + i)
		}
		return keys, tq.Batch{"ids": tq.Stacked(ids, n, 1), "meta": tq.ValuesOf(keys)}
	}
	put := func(round int) {
		t.Helper()
		keys, b := batch(round)
		if err := c.BatchPut(ctx, "p", keys, b, nil); err != nil {
			t.Fatal(err)
		}
	}
	put(0)
	if got := cc.take(); got["Prepare"] != 1 || got["Commit"] != 1 {
		t.Fatalf("the first put: calls %v, want a Prepare and a Commit", got)
	}
	deadline := time.Now().Add(10 * time.Second)
	blocks := 0
	for blocks == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no Block call in 10 s after the first put")
		}
		time.Sleep(time.Millisecond)
		blocks += cc.take()["Block"]
	}
	const puts = 3
	for r := 1; r <= puts; r++ {
		put(r)
	}
	got := cc.take()
	delete(got, "Block") // the next block, in the background
	if want := map[string]int{"PutNew": puts}; !reflect.DeepEqual(got, want) {
		t.Fatalf("%d puts of new keys with a block: calls %v, want %v", puts, got, want)
	}
	// Another client (without blocks) reads every row, in this client's
	// put order.
	r := openClient(t, s.URL)
	rows, err := r.List(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for round := range puts + 1 {
		keys, _ := batch(round)
		want = append(want, keys...)
	}
	if !reflect.DeepEqual(rows.Keys(), want) {
		t.Fatalf("List: %v, want %v", rows.Keys(), want)
	}
	for round := range puts + 1 {
		keys, b := batch(round)
		got, err := r.BatchGet(ctx, "p", keys)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"ids", "meta"} {
			for i := range n {
				if !reflect.DeepEqual(got[f].Row(i), b[f].Row(i)) {
					t.Fatalf("round %d row %d field %s: %v, want %v", round, i, f, got[f].Row(i), b[f].Row(i))
				}
			}
		}
	}
}
