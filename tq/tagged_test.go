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
// strategy: Write puts values under 1 KiB in "small" and others in
// "large" and reports that as the cell's tag. Reading or deleting a
// tagged value needs its tag back, so the client's tag bookkeeping shows
// in where the bytes are. A cell with no tag is read from and deleted in
// "", which Write never fills.
type tiered struct {
	stores map[string]*memory.Store
}

// tieredStager is tiered as a backends.Stager: packed cells are staged in
// heap memory, and Write tags them as it tags any cell.
type tieredStager struct{ *tiered }

var (
	_ backends.Store  = (*tiered)(nil)
	_ backends.Stager = tieredStager{}
)

func newTiered() *tiered {
	return &tiered{stores: map[string]*memory.Store{"": memory.New(), "small": memory.New(), "large": memory.New()}}
}

func (e *tiered) store(tag string) (*memory.Store, error) {
	s, ok := e.stores[tag]
	if !ok {
		return nil, fmt.Errorf("%w: tag %q", backends.ErrInvalid, tag)
	}
	return s, nil
}

func (e *tiered) Write(ctx context.Context, cells []backends.Cell) error {
	for i := range cells {
		c := &cells[i]
		c.Tag = "large"
		if len(c.Head)+len(c.Body) < 1<<10 {
			c.Tag = "small"
		}
		one := backends.Cell{Key: c.Key, Head: c.Head, Body: c.Body}
		if err := e.stores[c.Tag].Write(ctx, []backends.Cell{one}); err != nil {
			return err
		}
	}
	return nil
}

func (e *tiered) Read(ctx context.Context, cells []backends.ReadCell) error {
	for i := range cells {
		s, err := e.store(cells[i].Tag)
		if err != nil {
			return err
		}
		if err := s.Read(ctx, cells[i:i+1]); err != nil {
			return err
		}
	}
	return nil
}

func (e *tiered) Delete(ctx context.Context, cells []backends.Cell) error {
	for i := range cells {
		s, err := e.store(cells[i].Tag)
		if err != nil {
			return err
		}
		if err := s.Delete(ctx, cells[i:i+1]); err != nil {
			return err
		}
	}
	return nil
}

func (e *tiered) Close() error { return nil }

func (tieredStager) Stage(_ context.Context, cells []backends.Cell, sizes []int) error {
	for i, n := range sizes {
		cells[i].Body, cells[i].Staged = make([]byte, n), true
	}
	return nil
}

func (tieredStager) Unstage([]backends.Cell) {}

// counts is how many keys each store holds: plain, small, large.
func (e *tiered) counts() [3]int {
	return [3]int{e.stores[""].Len(), e.stores["small"].Len(), e.stores["large"].Len()}
}

// TestBackendTags: cells go where the engine's tags say, are read and
// deleted with those tags (overwrite, Clear, rollback), and a cell that
// moves to another tier on overwrite leaves nothing in the old one.
func TestBackendTags(t *testing.T) {
	for _, mode := range []string{"Write", "Stage"} {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			e := newTiered()
			var b backends.Store = e
			if mode == "Stage" {
				b = struct {
					*tiered
					tieredStager
				}{e, tieredStager{e}}
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
