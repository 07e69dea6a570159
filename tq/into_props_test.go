package tq_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/memory"
	"github.com/tqgo/tqgo/codec"
	"github.com/tqgo/tqgo/tq"
)

// Reading into the previous step's batch never changes what the store
// holds: re-reading the earlier partitions gives their values back.
func TestIntoKeepsStore(t *testing.T) {
	for _, eng := range []struct {
		name string
		data backends.Store
	}{{"memory", memory.New()}, {"spy", newSpy(nil)}, {"alloc spy", newSpy(nil).backend(true)}} {
		t.Run(eng.name, func(t *testing.T) {
			c := newClient(t, eng.data, nil)
			for _, n := range []int{1, 3, 40} {
				keys := keysN("k", n)
				readStepsInto(t, c, "p"+string(rune('0'+n)), n, 4, nil)
				for step := range 4 {
					part := "p" + string(rune('0'+n)) + string(rune('0'+step))
					checkStep(t, mustGet(t, c, part, keys), step, n)
				}
			}
		})
	}
}

// Cells answered whole, in Value, are decoded and copied into the reused
// column.
func TestIntoOtherCells(t *testing.T) {
	var calls atomic.Int32
	st := memory.New()
	c := newClient(t, wholeReader{st, &calls, func(_, i int) bool { return i%2 == 1 }}, nil)
	readStepsInto(t, c, "q", 9, 4, nil)
	if calls.Load() == 0 {
		t.Fatal("the reads did not go through the store that answers cells whole")
	}
}

// A cell that is not the tensor the metadata names fails BatchGetInto
// as corrupt, naming the cell, and leaves the store as it was.
func TestIntoCorruptField(t *testing.T) {
	ctx := t.Context()
	st := memory.New()
	c := newClient(t, st, nil)
	const n = 5
	keys := keysN("k", n)
	mustPut(t, c, "a", keys, stepBatch(1, n), nil)
	prev := mustGet(t, c, "a", keys)
	mustPut(t, c, "b", keys, stepBatch(2, n), nil)
	m, err := c.Lookup(ctx, "b", keys)
	if err != nil {
		t.Fatal(err)
	}
	// Row 3 of y rewritten as a 1-element tensor of another shape ([1],
	// where the metadata says a scalar).
	y3, _ := codec.FromSlice([]int64{203}, 1)
	enc, _ := codec.Encode(y3)
	if err := putRaw(ctx, st, []string{backends.StorageKey(m.Rows[3].Index, "y", 0)}, [][]byte{enc}); err != nil {
		t.Fatal(err)
	}
	_, err = c.BatchGetInto(ctx, "b", keys, prev)
	var ke *tq.KeyError
	if !errors.As(err, &ke) || ke.Partition != "b" || ke.Key != "k3" || ke.Field != "y" || !errors.Is(err, codec.ErrCorrupt) {
		t.Fatalf("BatchGetInto over a cell of another shape: %v, want a KeyError for b/k3/y matching codec.ErrCorrupt", err)
	}
	// The store still holds partition a.
	checkStep(t, mustGet(t, c, "a", keys), 1, n)
}

// Many goroutines each with their own batch, concurrently.
func TestIntoConcurrent(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	c := newClient(t, st, nil)
	const n = 16
	keys := keysN("k", n)
	for step := range 4 {
		mustPut(t, c, "c"+string(rune('0'+step)), keys, stepBatch(step, n), nil)
	}
	done := make(chan struct{})
	for g := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			var prev tq.Batch
			for i := range 20 {
				step := (g + i) % 4
				got, err := c.BatchGetInto(ctx, "c"+string(rune('0'+step)), keys, prev)
				if err != nil {
					t.Error(err)
					return
				}
				want := stepBatch(step, n)
				x, _ := tq.As[float32](got["x"])
				wx, _ := tq.As[float32](want["x"])
				if !slices.Equal(x, wx) {
					t.Error("differs")
					return
				}
				prev = got
			}
		}()
	}
	for range 4 {
		<-done
	}
}

// Random into batches over one arena: the read is right, and bytes of the
// arena outside the columns taken are untouched.
func TestIntoRandom(t *testing.T) {
	ctx := t.Context()
	for _, eng := range []backends.Store{memory.New(), newSpy(nil).backend(true)} {
		c := newClient(t, eng, nil)
		const n = 6
		keys := keysN("k", n)
		mustPut(t, c, "r", keys, stepBatch(3, n), nil)
		seed := uint64(1)
		rnd := func(m int) int { seed = seed*6364136223846793005 + 1442695040888963407; return int(seed>>33) % m }
		for iter := range 2000 {
			arena := make([]byte, 400)
			for i := range arena {
				arena[i] = 0xee
			}
			into := tq.Batch{}
			for _, f := range []string{"x", "y", "s", "z"} {
				if rnd(3) == 0 {
					continue
				}
				lo := rnd(300)
				hi := lo + rnd(400-lo)
				into[f] = tq.StackedTensor(codec.Tensor{DType: codec.Uint8, Shape: []int64{int64(hi - lo)}, Data: arena[lo:hi]})
			}
			got, err := c.BatchGetInto(ctx, "r", keys, into)
			if err != nil {
				t.Fatal(err)
			}
			checkStep(t, got, 3, n)
			// Mark bytes the result's columns hold.
			used := make([]bool, len(arena))
			for _, f := range []string{"x", "y"} {
				x, _ := got[f].Tensor()
				for i := range x.Data {
					p := &x.Data[i]
					for j := range arena {
						if &arena[j] == p {
							used[j] = true
						}
					}
				}
			}
			for j := range arena {
				if !used[j] && arena[j] != 0xee {
					t.Fatalf("iter %d: arena[%d] written outside the result's columns", iter, j)
				}
			}
		}
	}
}
