package tq_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/memory"
	"github.com/tqgo/tqgo/tq"
)

// tiered is an engine that picks a store per value, as a real one picks a
// strategy: PutTagged and Publish put packed values under 1 KiB in "small"
// and others in "large" and report that as the tag; plain Put goes to "".
// Reading or deleting a tagged value needs its tag back, so the client's
// tag bookkeeping shows in where the bytes are.
type tiered struct {
	stores map[string]*memory.Store
}

// taggedPut is tiered without Allocate: writes go through PutTagged.
type taggedPut struct{ *tiered }

// taggedAlloc is tiered with Allocate: writes go through Publish, whose
// Staged reports tags.
type taggedAlloc struct{ e *tiered }

var (
	_ backends.TaggedWriter  = taggedPut{}
	_ backends.TaggedReader  = taggedPut{}
	_ backends.TaggedDeleter = taggedPut{}
	_ backends.Allocator     = taggedAlloc{}
	_ backends.TagReporter   = (*tieredStaged)(nil)
)

func newTiered() *tiered {
	return &tiered{stores: map[string]*memory.Store{"": memory.New(), "small": memory.New(), "large": memory.New()}}
}

func (e *tiered) Put(ctx context.Context, keys []string, values [][]byte) error {
	return e.stores[""].Put(ctx, keys, values)
}
func (e *tiered) Get(ctx context.Context, keys []string) ([][]byte, error) {
	return e.stores[""].Get(ctx, keys)
}
func (e *tiered) Delete(ctx context.Context, keys []string) error {
	return e.stores[""].Delete(ctx, keys)
}
func (e *tiered) Close() error { return nil }

func (e *tiered) PutTagged(ctx context.Context, keys []string, values [][]byte) ([]string, error) {
	tags := make([]string, len(keys))
	for i, v := range values {
		tags[i] = "large"
		if len(v) < 1<<10 {
			tags[i] = "small"
		}
		if err := e.stores[tags[i]].Put(ctx, keys[i:i+1], values[i:i+1]); err != nil {
			return nil, err
		}
	}
	return tags, nil
}

func (e *tiered) GetTagged(ctx context.Context, keys, tags []string) ([][]byte, error) {
	out := make([][]byte, len(keys))
	for i, k := range keys {
		s, ok := e.stores[tags[i]]
		if !ok {
			return nil, fmt.Errorf("%w: tag %q", backends.ErrInvalid, tags[i])
		}
		got, err := s.Get(ctx, []string{k})
		if err != nil {
			return nil, err
		}
		out[i] = got[0]
	}
	return out, nil
}

func (e *tiered) DeleteTagged(ctx context.Context, keys, tags []string) error {
	for i, k := range keys {
		s, ok := e.stores[tags[i]]
		if !ok {
			return fmt.Errorf("%w: tag %q", backends.ErrInvalid, tags[i])
		}
		if err := s.Delete(ctx, []string{k}); err != nil {
			return err
		}
	}
	return nil
}

func (a taggedAlloc) Allocate(_ context.Context, keys []string, sizes []int) (backends.Staged, error) {
	bufs := make([][]byte, len(sizes))
	for i, n := range sizes {
		bufs[i] = make([]byte, n)
	}
	return &tieredStaged{e: a.e, keys: slices.Clone(keys), bufs: bufs}, nil
}

type tieredStaged struct {
	e    *tiered
	keys []string
	bufs [][]byte
	tags []string
}

func (s *tieredStaged) Buffers() [][]byte { return s.bufs }
func (s *tieredStaged) Tags() []string    { return s.tags }
func (s *tieredStaged) Publish(ctx context.Context) (err error) {
	s.tags, err = s.e.PutTagged(ctx, s.keys, s.bufs)
	return err
}
func (s *tieredStaged) Discard(context.Context) error { return nil }

// counts is how many keys each store holds: plain, small, large.
func (e *tiered) counts() [3]int {
	return [3]int{e.stores[""].Len(), e.stores["small"].Len(), e.stores["large"].Len()}
}

// TestBackendTags: cells go where the engine's tags say, are read and
// deleted with those tags (overwrite, Clear, rollback), and a cell that
// moves to another tier on overwrite leaves nothing in the old one.
func TestBackendTags(t *testing.T) {
	for _, mode := range []string{"PutTagged", "Allocate"} {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			e := newTiered()
			var b backends.Backend = taggedPut{e}
			if mode == "Allocate" {
				b = struct {
					taggedPut
					taggedAlloc
				}{taggedPut{e}, taggedAlloc{e}}
			}
			ms := newMetaSpy()
			c := newClient(t, b, ms, tq.WithKeysLimit(3))
			keys := keysN("k", 4)
			big := seq[float32](0, 4*512) // 2 KiB a row: large
			mustPut(t, c, "p", keys, tq.Batch{"big": tq.Stacked(big, 4, 512), "n": tq.ValuesOf([]int{1, 2, 3, 4})}, nil)
			if got := e.counts(); got != [3]int{0, 4, 4} {
				t.Fatalf("stores (plain, small, large) = %v, want [0 4 4]", got)
			}
			got := mustGet(t, c, "p", keys)
			if !slices.Equal(flat[float32](t, got["big"]), big) || len(got["n"].Values()) != 4 {
				t.Fatal("read back wrong values")
			}

			// Overwrite big with small values: the cells change tier.
			mustPut(t, c, "p", keys[:2], tq.Batch{"big": tq.Stacked([]float32{7, 8}, 2)}, nil)
			if got := e.counts(); got != [3]int{0, 6, 2} {
				t.Fatalf("after a tier change: stores %v, want [0 6 2]", got)
			}
			if v := flat[float32](t, mustGet(t, c, "p", keys[:2], "big")["big"]); !slices.Equal(v, []float32{7, 8}) {
				t.Fatalf("big after overwrite = %v", v)
			}

			// A failed commit removes this write's cells from their tiers.
			ms.commitErr = errInjected
			err := c.BatchPut(ctx, "p", keys, tq.Batch{"big": tq.Stacked(big, 4, 512)}, nil)
			if !errors.Is(err, errInjected) {
				t.Fatalf("put with failing commit: %v", err)
			}
			ms.commitErr = nil
			if got := e.counts(); got != [3]int{0, 6, 2} {
				t.Fatalf("after rollback: stores %v, want [0 6 2]", got)
			}

			if err := c.Clear(ctx, "p", keys[:3]); err != nil {
				t.Fatal(err)
			}
			if err := c.ClearPartition(ctx, "p"); err != nil {
				t.Fatal(err)
			}
			if got := e.counts(); got != [3]int{} {
				t.Fatalf("after clearing: stores %v, want empty", got)
			}
		})
	}
}
