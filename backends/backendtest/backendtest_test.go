package backendtest_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/backendtest"
	"github.com/tqgo/tqgo/backends/memory"
	"github.com/tqgo/tqgo/backends/metadata"
)

// tiered is a test Store that picks a store per value the way a real
// engine picks a strategy: values under 1 KiB go to a "small" store,
// others to a "large" one, and Write reports the name as the tag. Reading
// or deleting a value looks in its tag's store only (an unknown tag is an
// error), so it checks that the suite hands tags back; the tag "" looks in
// both.
type tiered struct {
	stores map[string]*memory.Store // by tag
}

var _ backends.Store = (*tiered)(nil)

func newTiered() *tiered {
	return &tiered{stores: map[string]*memory.Store{"small": memory.New(), "large": memory.New()}}
}

func tagFor(size int) string {
	if size < 1<<10 {
		return "small"
	}
	return "large"
}

// each calls fn once per tag with the positions of the cells of that tag.
func each(n int, tag func(i int) string, fn func(tag string, at []int) error) error {
	groups := map[string][]int{}
	for i := range n {
		groups[tag(i)] = append(groups[tag(i)], i)
	}
	for t, at := range groups {
		if err := fn(t, at); err != nil {
			return err
		}
	}
	return nil
}

// storesOf returns the store of tag; for "" (a key whose tag the caller
// never learned) every store, in a fixed order.
func (e *tiered) storesOf(tag string) ([]*memory.Store, error) {
	if tag == "" {
		return []*memory.Store{e.stores["small"], e.stores["large"]}, nil
	}
	s, ok := e.stores[tag]
	if !ok {
		return nil, fmt.Errorf("%w: unknown tag %q", backends.ErrInvalid, tag)
	}
	return []*memory.Store{s}, nil
}

func (e *tiered) Write(ctx context.Context, cells []backends.Cell) error {
	tag := func(i int) string { return tagFor(len(cells[i].Head) + len(cells[i].Body)) }
	return each(len(cells), tag, func(t string, at []int) error {
		group := make([]backends.Cell, len(at))
		for i, j := range at {
			group[i] = cells[j]
		}
		if err := e.stores[t].Write(ctx, group); err != nil {
			return err
		}
		for _, j := range at {
			cells[j].Tag = t
		}
		return nil
	})
}

func (e *tiered) Read(ctx context.Context, cells []backends.ReadCell) error {
	return each(len(cells), func(i int) string { return cells[i].Tag }, func(t string, at []int) error {
		stores, err := e.storesOf(t)
		if err != nil {
			return err
		}
		group := make([]backends.ReadCell, len(at))
		for _, s := range stores {
			for i, j := range at {
				if !group[i].Found {
					group[i] = cells[j]
				}
			}
			if err := s.Read(ctx, group); err != nil {
				return err
			}
		}
		for i, j := range at {
			cells[j] = group[i]
		}
		return nil
	})
}

func (e *tiered) Delete(ctx context.Context, cells []backends.Cell) error {
	return each(len(cells), func(i int) string { return cells[i].Tag }, func(t string, at []int) error {
		stores, err := e.storesOf(t)
		if err != nil {
			return err
		}
		group := make([]backends.Cell, len(at))
		for i, j := range at {
			group[i] = cells[j]
		}
		for _, s := range stores {
			if err := s.Delete(ctx, group); err != nil {
				return err
			}
		}
		return nil
	})
}

func (e *tiered) Close() error {
	var errs []error
	for _, s := range e.stores {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}

// colo is a test Colocated over a memory Store and MetaStore: WriteCommit
// is Store.Write then Commit, ReadRows is Lookup, plan, Store.Read. The
// engines of one test share one server (colo's stores), as the clients of
// a redis server do.
type colo struct {
	*memory.MetaStore
	data *memory.Store
}

var _ metadata.Colocated = colo{}

func (c colo) WriteCommit(ctx context.Context, partition string, cells []backends.Cell, updates []metadata.RowUpdate) (metadata.CommitResult, error) {
	if err := c.data.Write(ctx, cells); err != nil {
		return metadata.CommitResult{}, err
	}
	return c.Commit(ctx, partition, updates)
}

func (c colo) ReadRows(ctx context.Context, partition string, keys []string, plan func([]*metadata.Row) ([]backends.ReadCell, error)) ([]*metadata.Row, error) {
	rows, err := c.Lookup(ctx, partition, keys)
	if err != nil {
		return nil, err
	}
	cells, err := plan(rows)
	if err != nil {
		return nil, err
	}
	return rows, c.data.Read(ctx, cells)
}

var coloServers sync.Map // *testing.T -> colo

// newColo returns an engine over the test's colo server.
func newColo(t *testing.T) backends.Engine {
	c := colo{MetaStore: memory.NewMetaStore(), data: memory.New()}
	if v, loaded := coloServers.LoadOrStore(t, c); loaded {
		c = v.(colo)
	} else {
		t.Cleanup(func() { coloServers.Delete(t); _ = c.data.Close(); _ = c.MetaStore.Close() })
	}
	return backends.Engine{Data: c.data, Meta: c}
}

func newMemory(t *testing.T) backends.Engine {
	data, meta := memory.New(), memory.NewMetaStore()
	t.Cleanup(func() { _ = data.Close(); _ = meta.Close() })
	return backends.Engine{Data: data, Meta: meta, Local: true}
}

func TestRunStoreTiered(t *testing.T) {
	backendtest.RunStore(t, func(t *testing.T) backends.Store {
		s := newTiered()
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

// A memory Store seen only as a Store: the Stage subtests skip.
func TestRunStorePlain(t *testing.T) {
	backendtest.RunStore(t, func(t *testing.T) backends.Store { return struct{ backends.Store }{newMemory(t).Data} })
}

// The engine and client suites mostly wait out leases and delays, on
// engines of their own: the tests that run them call t.Parallel.
func TestRunEngineMemory(t *testing.T) {
	t.Parallel()
	backendtest.RunEngine(t, newMemory)
}

func TestRunEngineColocated(t *testing.T) {
	t.Parallel()
	backendtest.RunEngine(t, newColo)
}

func TestRunEngineWrapped(t *testing.T) {
	t.Parallel()
	for name, newEngine := range map[string]func(*testing.T) backends.Engine{"memory": newMemory, "colocated": newColo} {
		t.Run(name, func(t *testing.T) {
			backendtest.RunEngine(t, func(t *testing.T) backends.Engine { return backendtest.Wrap(newEngine(t), nil) })
		})
	}
}
