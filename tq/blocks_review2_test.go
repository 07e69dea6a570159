package tq_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/metadata"
	"github.com/tqgo/tqgo/tq"
)

// A client with WithIndexBlocks holds what it knows of blocks for a
// bounded number of partitions (blockParts): putting to a partition per
// step leaves nothing behind, whether or not its puts go by blocks (an
// engine without blocks, or puts of some keys that have rows).
func TestReview2BlockTopsBounded(t *testing.T) {
	ctx := context.Background()
	const parts = 100
	t.Run("no blocks", func(t *testing.T) {
		c, _ := memClient(t, tq.WithIndexBlocks()) // memory://: puts stay as they are
		for i := range parts {
			if err := c.BatchPut(ctx, fmt.Sprint("p", i), keysN("k", 2), blockBatch(0, 2), nil); err != nil {
				t.Fatal(err)
			}
		}
		if n := tq.BlockTops(c); n > 16 {
			t.Fatalf("after puts to %d partitions, the client remembers %d of them", parts, n)
		}
	})
	t.Run("mixed puts", func(t *testing.T) {
		c, st, meta := blockClient(t)
		other := newClient(t, unstaged{st}, meta)
		for i := range parts {
			p := fmt.Sprint("p", i)
			if err := other.BatchPut(ctx, p, keysN("k", 1), blockBatch(0, 1), nil); err != nil {
				t.Fatal(err)
			}
			// k0 has a row (another client's): not every key new, no
			// block wanted.
			if err := c.BatchPut(ctx, p, keysN("k", 2), blockBatch(0, 2), nil); err != nil {
				t.Fatal(err)
			}
		}
		if n := tq.BlockTops(c); n > 16 {
			t.Fatalf("after puts to %d partitions, the client remembers %d of them", parts, n)
		}
	})
}

// Many puts at once, of several sets of fields (their union growing
// while blocks are in use and on their way), of new keys and of keys
// that have rows, across more partitions than the client holds blocks
// of: after Close, no block is left live in any partition (Garbage with
// no age aborts live blocks: none may have cells to return), and every
// row reads back.
func TestReview2BlocksConcurrentSetsNoneLeft(t *testing.T) {
	for _, idle := range []time.Duration{time.Minute, 50 * time.Microsecond} {
		t.Run(fmt.Sprint("idle=", idle), func(t *testing.T) {
			defer tq.SetBlockIdle(idle)()
			concurrentSetsNoneLeft(t)
		})
	}
}

func concurrentSetsNoneLeft(t *testing.T) {
	ctx := context.Background()
	st, meta := blockEngine(t)
	c, err := tq.New(backends.Engine{Data: unstaged{st}, Meta: meta}, tq.WithIndexBlocks())
	if err != nil {
		t.Fatal(err)
	}
	const (
		parts   = 20
		workers = 8
		puts    = 60
	)
	sets := [][]string{{"a"}, {"b"}, {"a", "b"}, {"c"}, {"a", "c"}}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for i := range puts {
				p := fmt.Sprint("p", rng.IntN(parts))
				n := 1 + rng.IntN(3)
				keys := make([]string, n)
				for j := range keys {
					keys[j] = fmt.Sprintf("w%d-%d-%d", w, i, j)
				}
				if rng.IntN(5) == 0 && i > 0 {
					keys[0] = fmt.Sprintf("w%d-%d-%d", w, i-1, 0) // maybe a row already
				}
				b := tq.Batch{}
				for _, f := range sets[rng.IntN(len(sets))] {
					b[f] = tq.Stacked(make([]float32, n), n, 1)
				}
				if err := c.BatchPut(ctx, p, keys, b, nil); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for i := range parts {
		refs, err := meta.Garbage(ctx, fmt.Sprint("p", i), 0)
		if err != nil {
			t.Fatal(err)
		}
		var blocks []metadata.Ref // a block's garbage: generation 0, no backend tag
		for _, r := range refs {
			if r.Gen == 0 && r.Tag == "" {
				blocks = append(blocks, r)
			}
		}
		if len(blocks) != 0 {
			t.Fatalf("partition p%d: %d cells of a block left live or garbage (%v)", i, len(blocks), blocks[:min(len(blocks), 4)])
		}
	}
	t.Logf("calls: %v", meta.snapshot())
}
