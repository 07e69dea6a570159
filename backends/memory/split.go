package memory

import (
	"fmt"

	"context"

	"github.com/tqgo/tqgo/backends"
)

var _ backends.SplitReader = (*Store)(nil)

// GetSplit implements backends.SplitReader: it copies each value into its
// destination under the shard's read lock, so tq stacks a column with one
// copy and no per-cell decoding. A value of another length is returned as
// a view, like Get's.
func (s *Store) GetSplit(ctx context.Context, keys []string, dst []backends.SplitValue) error {
	if err := s.check(ctx, keys, len(dst)); err != nil {
		return err
	}
	s.forShards(keys, func(sh *shard, pos []int32) {
		sh.mu.RLock()
		defer sh.mu.RUnlock()
		for _, i := range pos {
			v, ok := sh.m[keys[i]]
			d := &dst[i]
			d.Found, d.Other = ok, nil
			switch {
			case !ok:
			case len(v) == len(d.Head)+len(d.Body):
				copy(d.Body, v[copy(d.Head, v):])
			default:
				d.Other = v
			}
		}
	})
	return nil
}

var _ backends.SplitWriter = (*Store)(nil)

// PutSplit implements backends.SplitWriter: it joins each head and body in
// buffers from Allocate (one arena for the small ones) and publishes them.
func (s *Store) PutSplit(ctx context.Context, keys []string, heads, bodies [][]byte) error {
	if err := s.check(ctx, keys, len(heads)); err != nil {
		return err
	}
	if len(bodies) != len(keys) {
		return fmt.Errorf("%w: %d keys, %d bodies", backends.ErrInvalid, len(keys), len(bodies))
	}
	sizes := make([]int, len(keys))
	for i := range sizes {
		sizes[i] = len(heads[i]) + len(bodies[i])
	}
	st, err := s.Allocate(ctx, keys, sizes)
	if err != nil {
		return err
	}
	for i, b := range st.Buffers() {
		copy(b[copy(b, heads[i]):], bodies[i])
	}
	return st.Publish(ctx)
}
