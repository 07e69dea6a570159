package backendtest_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/backendtest"
	"github.com/tqgo/tqgo/backends/memory"
)

// tiered is a test engine with every optional interface, which picks a
// store per value the way a real engine picks a strategy: PutTagged and
// Publish put values under 1 KiB in a "small" store and others in a
// "large" one and report the name as the tag, while plain Put uses a third
// store (tag ""). Reading or deleting a tagged value needs its tag, so it
// checks that the suite hands tags back.
type tiered struct {
	closed atomic.Bool
	stores map[string]*memory.Store // by tag
}

var (
	_ backends.Backend       = (*tiered)(nil)
	_ backends.Allocator     = (*tiered)(nil)
	_ backends.TaggedWriter  = (*tiered)(nil)
	_ backends.TaggedReader  = (*tiered)(nil)
	_ backends.TaggedDeleter = (*tiered)(nil)
	_ backends.TagReporter   = (*tieredStaged)(nil)
)

func newTiered() *tiered {
	return &tiered{stores: map[string]*memory.Store{"": memory.New(), "small": memory.New(), "large": memory.New()}}
}

func tagFor(size int) string {
	if size < 1<<10 {
		return "small"
	}
	return "large"
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

func (e *tiered) Close() error {
	e.closed.Store(true)
	var errs []error
	for _, s := range e.stores {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}

func (e *tiered) check(ctx context.Context, keys []string, n int) error {
	if e.closed.Load() {
		return backends.ErrClosed
	}
	if len(keys) != n {
		return fmt.Errorf("%w: %d keys, %d values", backends.ErrInvalid, len(keys), n)
	}
	return ctx.Err()
}

// each calls fn once per tag with the positions of the keys of that tag.
func each(tags []string, fn func(tag string, at []int) error) error {
	groups := map[string][]int{}
	for i, t := range tags {
		groups[t] = append(groups[t], i)
	}
	for t, at := range groups {
		if err := fn(t, at); err != nil {
			return err
		}
	}
	return nil
}

func pick[T any](s []T, at []int) []T {
	out := make([]T, len(at))
	for i, j := range at {
		out[i] = s[j]
	}
	return out
}

func (e *tiered) store(tag string) (*memory.Store, error) {
	s, ok := e.stores[tag]
	if !ok {
		return nil, fmt.Errorf("%w: unknown tag %q", backends.ErrInvalid, tag)
	}
	return s, nil
}

func (e *tiered) PutTagged(ctx context.Context, keys []string, values [][]byte) ([]string, error) {
	if err := e.check(ctx, keys, len(values)); err != nil {
		return nil, err
	}
	tags := make([]string, len(keys))
	for i, v := range values {
		tags[i] = tagFor(len(v))
	}
	return tags, each(tags, func(tag string, at []int) error {
		return e.stores[tag].Put(ctx, pick(keys, at), pick(values, at))
	})
}

func (e *tiered) GetTagged(ctx context.Context, keys, tags []string) ([][]byte, error) {
	if err := e.check(ctx, keys, len(tags)); err != nil {
		return nil, err
	}
	out := make([][]byte, len(keys))
	return out, each(tags, func(tag string, at []int) error {
		s, err := e.store(tag)
		if err != nil {
			return err
		}
		got, err := s.Get(ctx, pick(keys, at))
		if err != nil {
			return err
		}
		for i, j := range at {
			out[j] = got[i]
		}
		return nil
	})
}

func (e *tiered) DeleteTagged(ctx context.Context, keys, tags []string) error {
	if err := e.check(ctx, keys, len(tags)); err != nil {
		return err
	}
	return each(tags, func(tag string, at []int) error {
		s, err := e.store(tag)
		if err != nil {
			return err
		}
		return s.Delete(ctx, pick(keys, at))
	})
}

func (e *tiered) Allocate(ctx context.Context, keys []string, sizes []int) (backends.Staged, error) {
	if err := e.check(ctx, keys, len(sizes)); err != nil {
		return nil, err
	}
	bufs := make([][]byte, len(sizes))
	for i, n := range sizes {
		if n < 0 {
			return nil, fmt.Errorf("%w: negative size %d", backends.ErrInvalid, n)
		}
		bufs[i] = make([]byte, n)
	}
	return &tieredStaged{e: e, keys: keys, bufs: bufs}, nil
}

type tieredStaged struct {
	e    *tiered
	keys []string
	bufs [][]byte
	tags []string
	done bool
}

func (s *tieredStaged) Buffers() [][]byte { return s.bufs }
func (s *tieredStaged) Tags() []string    { return s.tags }

func (s *tieredStaged) Publish(ctx context.Context) error {
	if s.done {
		return fmt.Errorf("%w: already published or discarded", backends.ErrInvalid)
	}
	tags, err := s.e.PutTagged(ctx, s.keys, s.bufs)
	if err != nil {
		return err
	}
	s.tags, s.done = tags, true
	return nil
}

func (s *tieredStaged) Discard(context.Context) error {
	s.done = true
	return nil
}

// plain hides every optional interface of the backend it holds.
type plain struct{ backends.Backend }

func closeOnCleanup(t *testing.T, b backends.Backend) backends.Backend {
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func TestRunTiered(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) backends.Backend { return closeOnCleanup(t, newTiered()) })
}

func TestRunPlain(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) backends.Backend { return closeOnCleanup(t, plain{memory.New()}) })
}

func TestRunFaultyMemory(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) backends.Backend {
		return closeOnCleanup(t, backendtest.Wrap(memory.New(), nil))
	})
}

func TestRunFaultyTiered(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) backends.Backend {
		return closeOnCleanup(t, backendtest.Wrap(newTiered(), new(backendtest.Faulty)))
	})
}
